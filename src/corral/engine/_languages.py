"""Languages beyond Python: which toolchain serves each one, how it compiles and runs.

SandboxFusion's names (``cpp``, ``nodejs``, ``java``, ``rust``, ``go``, ``typescript``,
``bash``; ``python`` is the engine's own). Each is served where its toolchain is found: on
the host's ``PATH`` when the engine starts, or in the folder ``[languages.NAME] path`` names
(the toolchain's root, the folder holding its ``bin/``: ``rustc --print sysroot``, GOROOT,
JAVA_HOME). A root outside ``/usr`` is bound read-only into every sandbox at its own path, as
are folders under ``/etc`` its files link into (Debian's JDK keeps ``jvm.cfg`` there), so the
sandbox's uid runs the very files the host has. Nothing here runs user code: discovery only
resolves paths (``rustc --print sysroot`` for a rustup proxy is the one command it runs, the
operator's own toolchain, never a program of a caller).

Tools are named by their resolved path: a sandbox has a minimal ``/etc``, so
``/etc/alternatives`` links (``java``, ``cc``) would not resolve inside.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pwd
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

from corral.errors import LanguageUnavailable
from corral.sandbox import HEAP_MB

__all__ = [
    "LANGUAGE_NAMES",
    "PYTHON_NAMES",
    "CompileLimits",
    "Languages",
    "Toolchain",
    "discover_languages",
    "language_for_path",
]

_MIB = 1024 * 1024
HEAP = f"-Xmx{HEAP_MB}m"
"""A JVM's heap: the address space the run may still map less what else a JVM maps, worked
out inside the sandbox (the run's memory limit is only known there, as its RLIMIT_AS)."""
_PROBE_SECONDS = 10.0  # for ``rustc --print sysroot``: a rustup proxy may be slow once
_LINK_SCAN_FILES = 20_000  # files of a toolchain root looked at for links into /etc
LANGUAGE_NAMES = ("python", "cpp", "nodejs", "java", "rust", "go", "typescript", "bash")
"""Every language name corral knows (SandboxFusion's spelling)."""
PYTHON_NAMES = frozenset({"python", "python3"})
"""Names of the engine's own language."""
_SUFFIXES = {
    ".py": "python",
    ".cpp": "cpp",
    ".cc": "cpp",
    ".cxx": "cpp",
    ".js": "nodejs",
    ".mjs": "nodejs",
    ".java": "java",
    ".rs": "rust",
    ".go": "go",
    ".ts": "typescript",
    ".sh": "bash",
    ".bash": "bash",
}
_JVM = (
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-XX:CompressedClassSpaceSize=64m",
    "-XX:ReservedCodeCacheSize=64m",
    HEAP,
)
"""A JVM that fits the sandbox's address-space limit (RLIMIT_AS): by default it reserves a
quarter of the host's memory for its heap and a gigabyte for class metadata up front."""
_OWN_MOUNTS = ("/work/", "/tmp/", "/proc/", "/dev/", "/inputs/", "/mnt/")  # noqa: S108
"""Where every sandbox has file systems of its own, which would cover a toolchain there."""
_SHARED_ROOTS = frozenset({"/", "/usr", "/usr/local"})
"""Folders holding many toolchains' bin/ at once: never walked for links into /etc."""
_OWN_ETC = frozenset({"ssl"})
"""Folders of /etc the sandbox has its own of (its CA bundle holds corral's egress CA)."""
_SYSTEM = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/")  # bound in every sandbox already


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileLimits:
    """A compile's own bounds (its time is the caller's ``compile_timeout``)."""

    memory_bytes: int = 1024 * _MIB
    """The compiling sandbox's memory, all its processes together (cc1plus, ld, a JVM)."""
    pids: int = 128
    """Processes and threads: a compiler driver forks a few; javac runs dozens of threads."""
    output_chars: int = 64_000
    """Compiler messages kept per channel."""
    artifact_bytes: int = 64 * _MIB
    """Largest compiled artifact (all its files together)."""


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    source: str
    """The program's file name in the working folder."""
    tools: tuple[str, ...]
    """Executables the toolchain must have, in its ``bin/`` or on ``PATH``."""
    compile: tuple[str, ...] = ()
    """The compile command ({tool} is a tool's path), run in the working folder; () for none."""
    run: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    limits: CompileLimits = field(default_factory=CompileLimits)
    reports_compile: bool = True
    """False where SandboxFusion has no compile step (TypeScript runs under tsx there): the
    compile is cached as any, but answers have no ``compile_result`` and its failure is the
    run's."""


_BINARY = "a.out"
"""What a compiler writes in the working folder: no name a checkout bound there is likely to
have (a runtime under /work is bound at its own path, /work/main for a checkout there)."""

_SPECS: dict[str, _Spec] = {
    spec.name: spec
    for spec in (
        _Spec(
            "cpp",
            "main.cpp",
            ("g++",),
            ("{g++}", "-std=c++17", "-O2", "-pipe", "-s", "main.cpp", "-o", _BINARY, "-lpthread"),
            (f"./{_BINARY}",),
        ),
        _Spec("nodejs", "main.js", ("node",), (), ("{node}", "main.js")),
        _Spec(
            "java",
            "Main.java",
            ("javac", "java"),
            ("{javac}", "-encoding", "UTF-8", *(f"-J{flag}" for flag in _JVM), "Main.java"),
            ("{java}", *_JVM, "-Xss16m", "-cp", ".", "-ea", "Main"),
            (("MALLOC_ARENA_MAX", "2"),),
            limits=CompileLimits(memory_bytes=2048 * _MIB),
        ),
        _Spec(
            "rust",
            "main.rs",
            ("rustc", "cc"),
            (
                "{rustc}",
                "--edition",
                "2021",
                "-O",
                "-C",
                "linker={cc}",
                "-C",
                "strip=symbols",
                "main.rs",
                "-o",
                _BINARY,
            ),
            (f"./{_BINARY}",),
            limits=CompileLimits(memory_bytes=2048 * _MIB),
        ),
        _Spec(
            "go",
            "main.go",
            ("go",),
            ("{go}", "build", "-o", _BINARY, "main.go"),
            (f"./{_BINARY}",),
            # The sandbox's own /tmp: go needs a writable build cache.
            (("GOCACHE", "/tmp/go-cache"), ("GOPATH", "/tmp/go"), ("CGO_ENABLED", "0")),  # noqa: S108
            limits=CompileLimits(memory_bytes=2048 * _MIB),
        ),
        _Spec(
            "typescript",
            "main.ts",
            ("tsc", "node"),
            # Types stripped, not checked, as SandboxFusion's tsx runs TypeScript.
            ("{tsc}", "--noCheck", "--target", "es2020", "--module", "commonjs", "main.ts"),
            ("{node}", "main.js"),
            limits=CompileLimits(memory_bytes=2048 * _MIB),  # tsc is a large V8 program
            reports_compile=False,
        ),
        _Spec("bash", "main.sh", ("bash",), (), ("{bash}", "main.sh")),
    )
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Toolchain:
    """A language as this host serves it."""

    language: str
    source: str
    compile: tuple[str, ...]
    """The compile command with every tool's path; () for an interpreted language."""
    run: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    binds: tuple[str, ...]
    """Host folders bound read-only into every sandbox for it (none under /usr)."""
    identity: str
    """A digest of its tools (paths, sizes, times) and flags: part of an artifact's key."""
    limits: CompileLimits
    reports_compile: bool
    """Whether answers carry a compile: compiled, and ``_Spec.reports_compile``."""
    detail: str
    """Where it was found, for ``corral doctor``."""

    @property
    def compiled(self) -> bool:
        return bool(self.compile)


@dataclass(frozen=True, slots=True)
class Languages:
    """The toolchains found at start, and why the other languages are not served."""

    served: Mapping[str, Toolchain]
    missing: Mapping[str, str]

    def get(self, language: str) -> Toolchain:
        """The toolchain serving ``language``.

        Raises:
            LanguageUnavailable: ``language`` is unknown, or no toolchain serves it here.
        """
        toolchain = self.served.get(language)
        if toolchain is not None:
            return toolchain
        reason = self.missing.get(language)
        if reason is None:
            known = ", ".join(LANGUAGE_NAMES)
            raise LanguageUnavailable(f"unknown language {language!r} (known: {known})")
        raise LanguageUnavailable(f"{language} is not served here: {reason}")

    @classmethod
    def none(cls, reason: str) -> Languages:
        """No language beyond Python, each for ``reason``."""
        return cls({}, dict.fromkeys(LANGUAGE_NAMES[1:], reason))

    def binds(self) -> tuple[str, ...]:
        """Every folder the served toolchains need bound into the sandbox."""
        return tuple(sorted({b for t in self.served.values() for b in t.binds}))

    def as_dict(self) -> dict[str, object]:
        """For ``corral doctor --json``: each language, served or why not."""
        report: dict[str, object] = {"python": {"served": True, "detail": "the engine's own"}}
        for name in LANGUAGE_NAMES[1:]:
            toolchain = self.served.get(name)
            if toolchain is not None:
                report[name] = {"served": True, "detail": toolchain.detail}
            else:
                report[name] = {"served": False, "detail": self.missing.get(name, "")}
        return report


def language_for_path(path: str) -> str | None:
    """The language a file's suffix names (``.cpp`` is cpp), or None."""
    return _SUFFIXES.get(os.path.splitext(path)[1].lower())


def _rustup_sysroot(rustc: str) -> str | None:
    """The real toolchain behind a rustup proxy (which lives under the root user's home)."""
    try:
        done = subprocess.run(
            [rustc, "--print", "sysroot"],
            capture_output=True,
            text=True,
            timeout=_PROBE_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    root = done.stdout.strip()
    return root if done.returncode == 0 and os.path.isfile(f"{root}/bin/rustc") else None


def _find_tool(tool: str, root: str | None) -> str | None:
    if root is not None:
        candidate = os.path.join(root, "bin", tool)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
        if tool != "cc":  # the linker comes from the system unless the root has one
            return None
    found = shutil.which(tool)
    return None if found is None else os.path.realpath(found)


def _etc_links(root: str) -> set[str]:
    """Folders under /etc the files of ``root`` link into (Debian's JDK keeps ``jvm.cfg`` and
    its security settings in /etc/java-17-openjdk): each sandbox's /etc is a small one of its
    own, so they are bound into it too."""
    found: set[str] = set()
    seen = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            seen += 1
            path = os.path.join(folder, name)
            if os.path.islink(path):
                parts = os.path.realpath(path).split("/")
                if len(parts) > 3 and parts[1] == "etc" and parts[2] not in _OWN_ETC:
                    found.add("/".join(parts[:3]))
        if seen > _LINK_SCAN_FILES:
            break
    return found


def _too_wide(root: str) -> bool:
    """Whether binding ``root`` would show a sandbox more than a toolchain: a top-level
    folder (/opt) or someone's home (a tool in ~/bin), with its keys and history."""
    if root.count("/") < 2 or root == "/root" or os.path.dirname(root) == "/home":
        return True
    try:
        homes = {entry.pw_dir for entry in pwd.getpwall()}
    except OSError:
        homes = set()
    return root in homes


def _root_of(tool_path: str) -> str:
    """The toolchain root of a tool: the folder holding its ``bin/``."""
    return os.path.dirname(os.path.dirname(tool_path))


def _resolve(spec: _Spec, configured: str | None) -> Toolchain | str:
    """The toolchain for ``spec``, or why there is none."""
    root = None if not configured else os.path.realpath(configured)
    if root is not None and not os.path.isdir(root):
        return f"[languages.{spec.name}] path {configured!r} is not a folder"
    if root is None and spec.name == "rust":
        proxy = shutil.which("rustc") or _existing(os.path.expanduser("~/.cargo/bin/rustc"))
        if proxy is not None:
            root = _rustup_sysroot(proxy)
    tools: dict[str, str] = {}
    for tool in spec.tools:
        found = _find_tool(tool, root)
        if found is None:
            where = f"in {root}/bin" if root is not None else "on PATH"
            return f"no {tool} {where}"
        tools[tool] = found
    binds: set[str] = set()
    for path in tools.values():
        if path.startswith(_SYSTEM):
            continue
        if path.startswith(_OWN_MOUNTS):
            return f"{path} lies where each sandbox has its own file system"
        root_of = _root_of(path)
        if _too_wide(root_of):
            return (f"{path} would bind all of {root_of} into every sandbox: set "
                    f"[languages.{spec.name}] path to the toolchain's own folder")  # fmt: skip
        binds.add(root_of)
    for tool_path in tools.values():
        root_of = _root_of(tool_path)
        if root_of not in _SHARED_ROOTS:  # a toolchain's own folder (a JDK), not all of /usr
            binds |= _etc_links(root_of)
    compile_argv = tuple(_fill(part, tools) for part in spec.compile)
    run_argv = tuple(_fill(part, tools) for part in spec.run)
    identity = hashlib.sha256()
    for path in sorted(tools.values()):
        info = os.stat(path)
        identity.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
    identity.update(repr((compile_argv, run_argv, spec.env)).encode())
    main = tools[spec.tools[0]]
    return Toolchain(
        language=spec.name,
        source=spec.source,
        compile=compile_argv,
        run=run_argv,
        env=spec.env,
        binds=tuple(sorted(binds)),
        identity=identity.hexdigest(),
        limits=spec.limits,
        reports_compile=spec.reports_compile and bool(spec.compile),
        detail=main if not binds else f"{main} (bound read-only: {', '.join(sorted(binds))})",
    )


def _fill(part: str, tools: Mapping[str, str]) -> str:
    """A command word with each {tool} replaced by its path ({heap_mb} is the driver's)."""
    for tool, path in tools.items():
        part = part.replace("{" + tool + "}", path)
    return part


def _existing(path: str) -> str | None:
    return path if os.path.isfile(path) else None


def discover_languages(paths: Mapping[str, str] | None = None) -> Languages:
    """Find each language's toolchain: in ``paths[name]`` (a root holding ``bin/``) when
    given, else on ``PATH``. Found once per process for the same ``paths`` (and ``PATH``).

    Raises:
        LanguageUnavailable: ``paths`` names a language corral does not know.
    """
    return _discover(tuple(sorted((paths or {}).items())), os.environ.get("PATH", ""))


@functools.lru_cache(maxsize=8)
def _discover(given: tuple[tuple[str, str], ...], _path: str) -> Languages:
    paths = dict(given)
    for name in paths:
        if name not in _SPECS:
            raise LanguageUnavailable(f"[languages.{name}]: no such language")
    served: dict[str, Toolchain] = {}
    missing: dict[str, str] = {}
    for name, spec in _SPECS.items():
        found = _resolve(spec, paths.get(name))
        if isinstance(found, Toolchain):
            served[name] = found
        else:
            missing[name] = found
    return Languages(served, missing)

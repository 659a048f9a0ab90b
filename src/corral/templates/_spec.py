"""What a template is built from: a base, then steps in order (pip, copy, env, workdir, run).

A template is corral's own runtime (``code-interpreter-v1``: numpy, pandas and matplotlib
preloaded; ``base``: nothing preloaded) plus a layer its build makes. The layer holds only what
pip and the steps can make as the sandbox's user: Python packages and files. It cannot hold OS
packages (apt, a Docker image): those steps are refused with the step named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from corral.errors import TemplateError

__all__ = [
    "BASES",
    "MAX_COPY_BYTES",
    "CopyFile",
    "Env",
    "Pip",
    "Run",
    "Step",
    "TemplateSpec",
    "Workdir",
    "check_name",
    "describe",
    "home_path",
]

BASES = ("code-interpreter-v1", "base")
"""The runtimes a template starts from: corral's full one and its lean one."""
MAX_COPY_BYTES = 64 * 1024 * 1024
"""Bytes all of a build's copied files may hold together (they travel in the request)."""
_MAX_STEPS = 256
MAX_ENV_CHARS = 16_384
"""Characters of a template's environment (names and values): it travels to its zygote in
one control message."""
_MAX_TEXT = 8192  # characters of one command or package spec
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_HOMES = ("/home/user", "/mnt/data", "/work")
"""Where a sandbox's home is, by the names E2B's clients, DIAL's and corral's own use."""


def check_name(name: str) -> str:
    """A template's name: lower-case letters, digits, ``.``, ``_`` and ``-``, at most 63.

    Raises:
        TemplateError: it is not such a name (or names a base).
    """
    if not _NAME.fullmatch(name) or ".." in name:
        raise TemplateError(
            f"template name {name!r}: 1 to 63 lower-case letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    if name in BASES:
        raise TemplateError(f"template name {name!r} is a base runtime's")
    return name


def home_path(dest: str, what: str) -> str:
    """``dest`` relative to the sandbox's home: relative already, or under ``/home/user``
    (``/mnt/data``, ``/work``). A trailing ``/`` is kept (a folder to copy into).

    Raises:
        TemplateError: it leaves the home (``/opt/app``, ``..``).
    """
    text = dest.strip()
    folder = text.endswith("/")
    path = PurePosixPath(text)
    if path.is_absolute():
        for home in _HOMES:
            if path == PurePosixPath(home) or str(path).startswith(home + "/"):
                path = path.relative_to(home)
                break
        else:
            raise TemplateError(
                f"{what}: {dest!r} is outside the sandbox's home (/home/user): a template's "
                "files live there"
            )
    parts = path.parts
    if any(p in ("..", "") for p in parts) or "\0" in text:
        raise TemplateError(f"{what}: {dest!r} leaves the sandbox's home")
    rel = "/".join(p for p in parts if p != ".")
    return rel + "/" if folder and rel else rel


@dataclass(frozen=True, slots=True)
class Pip:
    """``pip install`` into the layer: packages, and a requirements file's text."""

    packages: tuple[str, ...] = ()
    requirements: str = ""

    def __post_init__(self) -> None:
        if not self.packages and not self.requirements.strip():
            raise TemplateError("pip: no package to install")
        for package in self.packages:
            if not package or len(package) > _MAX_TEXT or package.startswith("-"):
                raise TemplateError(f"pip: {package!r} is no package requirement")


@dataclass(frozen=True, slots=True)
class CopyFile:
    """A file the build puts in the sandbox's home (``dest`` relative to it)."""

    dest: str
    data: bytes
    mode: int = 0o644


@dataclass(frozen=True, slots=True)
class Env:
    """Environment variables for the later steps and for every sandbox of the template."""

    pairs: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        for name, value in self.pairs:
            if not _ENV_NAME.fullmatch(name) or "\0" in value or len(value) > _MAX_TEXT:
                raise TemplateError(f"env: {name!r} is no environment variable name")


@dataclass(frozen=True, slots=True)
class Workdir:
    """The working folder of the later steps and of the template's code (home-relative)."""

    path: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", home_path(self.path, "workdir").rstrip("/"))


@dataclass(frozen=True, slots=True)
class Run:
    """A shell command run in the build's sandbox as its user, in the working folder."""

    command: str

    def __post_init__(self) -> None:
        if not self.command.strip() or len(self.command) > _MAX_TEXT or "\0" in self.command:
            raise TemplateError(f"run: {self.command[:80]!r} is no command")


Step = Pip | CopyFile | Env | Workdir | Run


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    """A template to build: its base, its steps in order, and what every sandbox gets."""

    base: str = BASES[0]
    steps: tuple[Step, ...] = ()
    preload: tuple[str, ...] = ()
    """Modules each of its workers imports before it waits in the pool."""

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        """Every ``Env`` step's variables, later ones winning: the sandboxes' environment."""
        merged: dict[str, str] = {}
        for step in self.steps:
            if isinstance(step, Env):
                merged.update(step.pairs)
        return tuple(merged.items())

    @property
    def workdir(self) -> str:
        """The last ``Workdir`` step's folder ("" the home): where the template's code starts."""
        folders = [s.path for s in self.steps if isinstance(s, Workdir)]
        return folders[-1] if folders else ""

    def __post_init__(self) -> None:
        if self.base not in BASES:
            raise TemplateError(f"base {self.base!r}: a template starts from one of {BASES}")
        if len(self.steps) > _MAX_STEPS:
            raise TemplateError(f"at most {_MAX_STEPS} steps")
        env_chars = sum(len(k) + len(v) for k, v in self.env)
        if env_chars > MAX_ENV_CHARS:
            raise TemplateError(f"env: {env_chars} characters, more than {MAX_ENV_CHARS}")
        copied = sum(len(s.data) for s in self.steps if isinstance(s, CopyFile))
        if copied > MAX_COPY_BYTES:
            raise TemplateError(f"copied files hold {copied} bytes, more than {MAX_COPY_BYTES}")
        for module in self.preload:
            if not all(part.isidentifier() for part in module.split(".")):
                raise TemplateError(f"preload: {module!r} is no module name")


def describe(step: Step) -> str:
    """One line saying what a step does, for the build log and ``corral template show``."""
    if isinstance(step, Pip):
        extra = ["-r requirements"] if step.requirements.strip() else []
        return "pip install " + " ".join([*extra, *step.packages])
    if isinstance(step, CopyFile):
        return f"copy {len(step.data)} bytes to ~/{step.dest}"
    if isinstance(step, Env):
        return "env " + " ".join(f"{k}=..." for k, _ in step.pairs)
    if isinstance(step, Workdir):
        return f"workdir ~/{step.path}"
    return f"run {step.command}"

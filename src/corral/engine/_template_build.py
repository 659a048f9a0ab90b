"""Building a template: its steps run in a sandbox, and what they made becomes the layer.

The build is a session of the engine like any other (its own uid, uid 1000 inside, the same
walls, the network only to the package index when ``[network]`` allows its host, otherwise
none and the wheelhouse): pip installs into a prefix in the session's home, files are put in
the home, commands run in a shell there. Nothing the steps do touches the host. When every
step has succeeded, the server copies the session's regular files out, as the session's user
and without following a link (``SessionFiles``), into a fresh staging folder only it can
write: the prefix's ``site-packages`` becomes the layer's, the rest of the home its files.
The session's disk quota bounds the layer; ``timeout`` bounds the whole build; one step's
failure ends the build with that step's output as its log.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import anyio
import anyio.to_thread

from corral.errors import InvalidPath, NetworkPolicyError, TemplateBuildFailed, TemplateError
from corral.network import NO_NETWORK, SandboxNetwork
from corral.templates import (
    CopyFile,
    Env,
    Pip,
    Run,
    Template,
    TemplateSpec,
    TemplateStore,
    Workdir,
    describe,
)

if TYPE_CHECKING:
    from corral.engine._engine import Engine
    from corral.engine._session import Session

__all__ = ["DEFAULT_BUILD_SECONDS", "BuildLog", "LogLine", "build_network", "build_template"]

logger = logging.getLogger("corral.engine")

HOME = "/mnt/data"
"""The build session's home, where the steps run and the layer's files are made."""
_PREFIX = ".corral-prefix"
_SITE = f"{_PREFIX}/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
MAX_LAYER_FILES = 100_000
"""Files a layer may hold (packages and files together)."""
MAX_FILES_BYTES = 32 * 1024 * 1024
"""Bytes the template's own files (not its packages) may hold: each sandbox gets a copy."""
DEFAULT_BUILD_SECONDS = 900.0
_LOG_TAIL = 60_000  # characters of a step's output kept in its log
MAX_LOG_LINES = 20_000
"""Lines one build's log keeps (its steps print what their code chooses)."""
_LINE_CHARS = 4096
_COPY_CHUNK = 1 << 20
_CELL = """\
import os as _os, subprocess as _sp, sys as _sys
_env = {{**_os.environ, **{env!r}}}
_env["PATH"] = {bin!r} + ":" + _os.environ.get("PATH", "/usr/bin:/bin")
_done = _sp.run({command!r}, shell=True, cwd={cwd!r}, env=_env,
                stdin=_sp.DEVNULL, stdout=_sp.PIPE, stderr=_sp.STDOUT)
_sys.stdout.write(_done.stdout.decode("utf-8", "replace")[-{tail}:])
if _done.returncode:
    raise RuntimeError(f"the step exited with status {{_done.returncode}}")
"""


@dataclass(frozen=True, slots=True)
class LogLine:
    timestamp: float
    level: Literal["info", "error"]
    message: str
    step: int = -1


@dataclass(slots=True)
class BuildLog:
    """What a build said, line by line; ``changed`` is set whenever a line is added."""

    lines: list[LogLine] = field(default_factory=list)
    on_line: Callable[[LogLine], None] | None = None

    def say(
        self, message: str, *, level: Literal["info", "error"] = "info", step: int = -1
    ) -> None:
        for text in message.splitlines() or [""]:
            if len(self.lines) >= MAX_LOG_LINES:
                return  # the last line says the log was cut; readers' offsets stay valid
            if len(self.lines) == MAX_LOG_LINES - 1:
                text, level = f"(the log stops here: at most {MAX_LOG_LINES} lines)", "error"
            line = LogLine(time.time(), level, text[:_LINE_CHARS], step)
            self.lines.append(line)
            if self.on_line is not None:
                self.on_line(line)


def build_network(engine: Engine, index_host: str) -> SandboxNetwork:
    """The package index's host alone, when the server's ceiling allows it; else none (the
    build then installs from the wheelhouse only)."""
    ceiling = engine.network_ceiling
    if ceiling is None or not index_host:
        return NO_NETWORK
    try:
        return ceiling.subset([index_host])
    except NetworkPolicyError:
        return NO_NETWORK


def _step_env(env: dict[str, str]) -> dict[str, str]:
    return {
        **env,
        "HOME": HOME,
        "PIP_PREFIX": f"{HOME}/{_PREFIX}",
        "PYTHONPATH": f"{HOME}/{_SITE}",
        "PIP_NO_CACHE_DIR": "1",
    }


async def _shell(
    session: Session, command: str, cwd: str, env: dict[str, str], index: int, log: BuildLog,
    deadline: float,
) -> None:  # fmt: skip
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TemplateBuildFailed("the build ran out of time", step=index)
    limits = dataclasses.replace(session.limits, timeout=remaining)
    code = _CELL.format(
        command=command, cwd=cwd, env=_step_env(env), bin=f"{HOME}/{_PREFIX}/bin", tail=_LOG_TAIL
    )
    result = await session.run(code, limits=limits)
    said = (result.stdout + result.stderr).rstrip()
    if said:
        log.say(said, step=index)
    if result.outcome != "ok":
        why = result.error.message if result.error is not None else result.outcome
        if result.outcome == "timeout":
            why = "the build ran out of time"
        log.say(f"step {index + 1} failed: {why}", level="error", step=index)
        raise TemplateBuildFailed(f"step {index + 1} failed: {why}", step=index, log=said)


async def _run_steps(session: Session, spec: TemplateSpec, log: BuildLog, deadline: float) -> None:
    env: dict[str, str] = {}
    cwd = HOME
    for index, step in enumerate(spec.steps):
        log.say(f"step {index + 1}: {describe(step)}", step=index)
        if isinstance(step, Env):
            env.update(step.pairs)
        elif isinstance(step, Workdir):
            cwd = f"{HOME}/{step.path}" if step.path else HOME
            await session.files.make_dir(step.path or ".")
        elif isinstance(step, CopyFile):
            try:
                await session.files.put(step.dest, step.data)
            except (InvalidPath, OSError) as exc:
                raise TemplateBuildFailed(f"step {index + 1}: {exc}", step=index) from exc
            if step.mode & 0o111:
                await _shell(session, f"chmod +x {shlex.quote(step.dest)}", HOME, env, index,
                             log, deadline)  # fmt: skip
        elif isinstance(step, Pip):
            args = ["python", "-m", "pip", "install", "--no-warn-script-location"]
            if step.requirements.strip():
                await session.files.put(f"{_PREFIX}/requirements-{index}.txt",
                                        step.requirements.encode())  # fmt: skip
                args += ["-r", f"{HOME}/{_PREFIX}/requirements-{index}.txt"]
            command = " ".join(shlex.quote(a) for a in [*args, *step.packages])
            await _shell(session, command, cwd, env, index, log, deadline)
        elif isinstance(step, Run):
            await _shell(session, step.command, cwd, env, index, log, deadline)


def _copy_out(fd: int, size: int, target: Path, limit: int) -> int:
    """Copy at most ``size`` bytes of ``fd`` (the sandbox's file), and never more than
    ``limit``, to a new ``target`` in the staging folder; returns how many. Past ``limit``
    raises: what the sandbox holds may have grown since it was listed."""
    try:
        if size > limit:
            raise TemplateBuildFailed(f"the layer would hold more than its {limit} bytes left")
        _make_folders(target.parent)
        executable = os.fstat(fd).st_mode & 0o111
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(target, flags, 0o755 if executable else 0o644)
        copied = 0
        try:
            while copied < size and (chunk := os.read(fd, min(_COPY_CHUNK, size - copied))):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
                copied += len(chunk)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return copied


def _make_folders(folder: Path) -> None:
    """``folder`` and those above it in the staging folder, one at a time (a sandbox's path
    may be deep enough to recurse past Python's limit)."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for each in reversed(missing):
        each.mkdir(mode=0o755)


async def _collect(session: Session, staged: Path, log: BuildLog) -> None:
    listing = await session.files.list(max_entries=MAX_LAYER_FILES)
    if listing.truncated:
        raise TemplateBuildFailed(f"the build made more than {MAX_LAYER_FILES} files")
    # Counted in the bytes copied, not those listed: what runs on in the build's sandbox
    # may grow a file meanwhile. The layer holds at most what the build's disk held.
    layer_left, files_left = session.files.quota_bytes, MAX_FILES_BYTES
    count = 0
    for entry in listing:
        is_file = False
        if entry.path.startswith(_SITE + "/"):
            target = staged / "site-packages" / entry.path[len(_SITE) + 1 :]
        elif entry.path == _PREFIX or entry.path.startswith(_PREFIX + "/"):
            continue  # pip's scripts and the requirements: not the layer's
        else:
            is_file = True
            target = staged / "files" / entry.path
        try:
            fd, size = await session.files.open(entry.path)
        except (InvalidPath, OSError):
            continue  # a name that cannot be opened (not UTF-8), or gone meanwhile
        if is_file and size > files_left:
            os.close(fd)
            raise TemplateBuildFailed(
                f"the template's files hold more than {MAX_FILES_BYTES} bytes (each "
                "sandbox gets a copy): install data with pip, or fetch it at run time"
            )
        try:
            copied = await anyio.to_thread.run_sync(_copy_out, fd, size, target, layer_left)
        except OSError as exc:  # the tree changed under the copy (a file became a folder)
            raise TemplateBuildFailed(f"the layer could not be copied: {exc}") from exc
        layer_left -= copied
        if is_file:
            files_left -= copied
        count += 1
    log.say(f"layer: {count} files")


async def build_template(
    engine: Engine,
    store: TemplateStore,
    name: str,
    spec: TemplateSpec,
    *,
    owner: str,
    log: BuildLog,
    network: SandboxNetwork = NO_NETWORK,
    seconds: float = DEFAULT_BUILD_SECONDS,
) -> Template:
    """Build ``spec`` as ``name`` for ``owner`` and store it; returns the stored template.

    Raises:
        TemplateBuildFailed: a step failed, the build took longer than ``seconds`` or made
            more than its bounds allow (the log says what happened).
        TemplateError: ``name`` is taken by another owner.
        EngineClosed: the engine is not running.
    """
    store.check_owner(name, owner)
    build_id, staged = await anyio.to_thread.run_sync(store.staging)
    deadline = time.monotonic() + seconds
    log.say(f"building {name} ({build_id}) on {spec.base}")
    try:
        session = await engine.open_session(tenant=owner, network=network)
        try:
            with anyio.fail_after(seconds):
                await _run_steps(session, spec, log, deadline)
                await _collect(session, staged, log)
        except TimeoutError:
            log.say(f"the build exceeded its {seconds:g} s", level="error")
            raise TemplateBuildFailed(f"the build exceeded its {seconds:g} s") from None
        finally:
            with anyio.CancelScope(shield=True):
                await session.close()
        template = await anyio.to_thread.run_sync(
            store.install, name, owner, spec, build_id, staged
        )
    except TemplateError as exc:
        if not isinstance(exc, TemplateBuildFailed):
            log.say(str(exc), level="error")
        raise
    finally:
        with anyio.CancelScope(shield=True):  # also when the server stops mid-build
            await anyio.to_thread.run_sync(store.discard, staged)
    log.say(f"template {name} is ready ({template.layer_bytes} bytes)")
    return template

"""The parts of a pause: freezing a session's cgroup, and copying its state out and back.

A pause in a running server freezes the session's cgroup (``full``): every process of it is
stopped where it is, uses no CPU and holds no slot, and thaws in milliseconds with everything
it had. A pause that must outlive the session's processes (``filesystem``, a restart, a
snapshot) copies its state into the data folder (``_keepsafe``): its files always, and in
``full`` mode its interpreter's globals as ``sandbox/inside/_keep`` writes them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import tarfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral._limits import Limits
from corral.engine._files import SessionFiles
from corral.engine._keepsafe import KeepSafe, PauseMode
from corral.engine._network import SessionNetwork
from corral.engine._result import ExecutionResult
from corral.errors import SnapshotError, WorkerCrashed, WorkerError
from corral.network import SandboxNetwork
from corral.sandbox import Command, HolderLike, SandboxCgroup, Worker

__all__ = [
    "KEEP_FILE",
    "MAX_LOST",
    "Keeper",
    "NoHolder",
    "PauseState",
    "Report",
    "Respawn",
    "SpawnHolder",
    "entry_name",
    "freeze",
    "load_state",
    "read_files",
    "save_state",
    "thaw",
    "write_files",
]

KEEP_FILE = ".corral-keep"
"""In the session's folder while a full pause or snapshot is written or read, never after."""
_KEEP_PATH = f"/mnt/data/{KEEP_FILE}"
_FREEZE_WAIT = 5.0  # seconds for the kernel to stop every process of a sandbox
_FREEZE_POLL = 0.002  # seconds between looks at the freezer's state
_MAX_FILES = 100_000  # files of one session a pause copies
_CHUNK = 1 << 20  # bytes per read when files go back
MAX_LOST = 1000  # names a report may list as lost
_MAX_REPORT_CHARS = 1 << 20
_MAX_PARTS = 100_000  # files one saved state may be written as

RunInside = Callable[[str], Awaitable[ExecutionResult]]
"""Runs a cell in the session's interpreter, the session already held."""


class Report(BaseModel):
    """What the interpreter said it kept and lost (hostile: bounded, validated)."""

    model_config = ConfigDict(extra="ignore")

    kept: int = 0
    lost: dict[str, str] = Field(default_factory=dict)
    lost_count: int = 0
    files: int = Field(default=0, ge=0)


async def freeze(cgroup: SandboxCgroup) -> None:
    """Stop every process of the sandbox; returns once the kernel says all are stopped.

    Raises:
        OSError: no freezer, or the kernel did not freeze it in time (it is thawed again).
    """
    await anyio.to_thread.run_sync(cgroup.set_frozen, True)
    try:
        with anyio.fail_after(_FREEZE_WAIT):
            while cgroup.frozen() is not True:  # noqa: ASYNC110 - the kernel has no event
                await anyio.sleep(_FREEZE_POLL)
    except BaseException:
        await thaw(cgroup)
        raise


async def thaw(cgroup: SandboxCgroup) -> None:
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(cgroup.set_frozen, False)


def _report(result: ExecutionResult, what: str) -> Report:
    if result.outcome != "ok":
        detail = result.error.message if result.error is not None else result.message
        raise SnapshotError(f"the interpreter could not {what} its state: {detail}")
    line = result.stdout[-_MAX_REPORT_CHARS:].strip().rpartition("\n")[2]
    try:
        report = Report.model_validate(json.loads(line))
    except (ValueError, ValidationError):
        raise SnapshotError(f"the interpreter's report of its {what} was not readable") from None
    lost = dict(list(report.lost.items())[:MAX_LOST])
    return Report(
        kept=report.kept,
        lost={k[:200]: str(v)[:200] for k, v in lost.items()},
        lost_count=report.lost_count,
        files=report.files,
    )


async def save_state(run: RunInside, files: SessionFiles, target: Path) -> dict[str, str]:
    """The interpreter's globals into ``target``; returns the names it could not keep.

    The interpreter writes them as files no larger than its file-size limit
    (``sandbox/inside/_keep``); they are joined here, in order, and removed.

    Raises:
        SnapshotError: the interpreter could not write them (it is gone, or its disk is full).
    """
    code = f"__import__('corral.sandbox.inside._keep', fromlist=['_']).save({_KEEP_PATH!r})"
    count = _MAX_PARTS
    try:
        report = _report(await run(code), "save")
        count = min(report.files, _MAX_PARTS)
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        # What the interpreter wrote fits the session's disk, whatever its report says
        # (a sparse file's size is not its disk: its bytes are what would land on ours).
        budget = files.quota_bytes
        try:
            for part in range(count):
                fd, size = await files.open(f"{KEEP_FILE}.{part}")
                try:
                    if size > budget:
                        raise SnapshotError("the interpreter's state is larger than its disk")
                    budget -= await anyio.to_thread.run_sync(_copy_out, fd, out, size)
                finally:
                    os.close(fd)
        finally:
            os.close(out)
    except (OSError, WorkerError, LookupError) as exc:
        raise SnapshotError(f"the interpreter's state could not be written: {exc}") from exc
    finally:
        with anyio.CancelScope(shield=True):
            for part in range(count):
                try:
                    await files.delete(f"{KEEP_FILE}.{part}")
                except (OSError, WorkerError, LookupError):
                    break
    return report.lost


def _copy_out(fd: int, out: int, size: int) -> int:
    """At most ``size`` bytes of ``fd`` onto ``out`` (what it holds past them, written
    meanwhile, is not copied); returns how many."""
    copied = 0
    while copied < size and (chunk := os.read(fd, min(_CHUNK, size - copied))):
        view = memoryview(chunk)
        while view:
            view = view[os.write(out, view) :]
        copied += len(chunk)
    return copied


async def load_state(run: RunInside, files: SessionFiles, source: Path) -> dict[str, str]:
    """The globals ``save_state`` wrote, back into a fresh interpreter; returns the names
    that did not come back.

    Raises:
        SnapshotError: the state could not be loaded at all (corrupt, or of another kind).
    """
    await files.put(KEEP_FILE, _chunks(source))
    code = f"__import__('corral.sandbox.inside._keep', fromlist=['_']).load({_KEEP_PATH!r})"
    return _report(await run(code), "load").lost


async def _chunks(path: Path) -> AsyncIterator[bytes]:
    handle = await anyio.to_thread.run_sync(path.open, "rb")
    try:
        while chunk := await anyio.to_thread.run_sync(handle.read, _CHUNK):
            yield chunk
    finally:
        handle.close()


async def write_files(files: SessionFiles, target: Path) -> dict[str, str]:
    """Every regular file of the session into the tar ``target``; returns those that could
    not be copied (changed while read, or past the bound) and why."""
    listing = await files.list(_MAX_FILES)
    lost: dict[str, str] = {}

    def note(path: str, why: str) -> None:
        if len(lost) < MAX_LOST:
            lost[path[:200]] = why[:200]
        else:
            lost["(more)"] = "further files not copied either"

    if listing.truncated:
        note("(files)", f"only the first {_MAX_FILES} files were kept")
    # A sandbox's files fit its disk; sparse ones may claim more: the tar keeps at most that.
    budget = files.quota_bytes
    archive = await anyio.to_thread.run_sync(lambda: tarfile.open(target, "w"))  # noqa: SIM115
    try:
        for entry in listing:
            if _is_keep_part(entry.path):
                continue  # a pause's own, in flight
            try:
                fd, size = await files.open(entry.path)
            except (OSError, WorkerError, LookupError) as exc:
                note(entry.path, f"not copied: {exc}")
                continue
            try:
                if size > budget:
                    note(entry.path, "not copied: the files kept already fill the session's disk")
                    continue
                await anyio.to_thread.run_sync(_add, archive, entry.path, fd, size)
                budget -= size
            except (OSError, tarfile.TarError) as exc:
                note(entry.path, f"not copied: {exc}")
            finally:
                os.close(fd)
    finally:
        await anyio.to_thread.run_sync(archive.close)
    return lost


def _is_keep_part(path: str) -> bool:
    """A part of a saved state in flight (``.corral-keep`` or ``.corral-keep.<n>``), not a
    user's file that happens to start so."""
    number = path.removeprefix(f"{KEEP_FILE}.")
    return path == KEEP_FILE or (number != path and number.isascii() and number.isdigit())


def _add(archive: tarfile.TarFile, name: str, fd: int, size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    with os.fdopen(os.dup(fd), "rb") as handle:
        archive.addfile(info, handle)


async def read_files(files: SessionFiles, source: Path) -> None:
    """Put the files of the tar ``source`` into the session, each through its own checks.

    Raises:
        SnapshotError: the tar is corrupt.
    """
    try:
        archive = await anyio.to_thread.run_sync(lambda: tarfile.open(source, "r:"))  # noqa: SIM115
    except (OSError, tarfile.TarError) as exc:
        raise SnapshotError(f"the snapshot's files cannot be read: {exc}") from None
    try:
        members = await anyio.to_thread.run_sync(archive.getmembers)
        for member in members:
            if not member.isreg():
                continue
            handle = archive.extractfile(member)
            if handle is None:
                continue

            async def chunks(handle: object = handle) -> AsyncIterator[bytes]:
                read = handle.read  # type: ignore[attr-defined]
                while chunk := await anyio.to_thread.run_sync(read, _CHUNK):
                    yield chunk

            await files.put(member.name, chunks())
    except tarfile.TarError as exc:
        raise SnapshotError(f"the snapshot's files are corrupt: {exc}") from None
    finally:
        archive.close()


class NoHolder:
    """The holder of a session paused to disk: it has no processes; nothing may start."""

    pid = -1
    outer_id = -1
    cgroup: SandboxCgroup | None = None
    interpreter_alive = False
    closed = True
    pidfd: int | None = None

    def running_interpreters(self) -> int:
        return 0

    async def wait_ready(self) -> None:
        raise WorkerCrashed("the session is paused to disk: it has no processes")

    def open_data_dir(self) -> int:
        raise WorkerCrashed("the session is paused to disk: it has no folder")

    async def start_interpreter(self, slot: int = 0) -> Worker:
        raise WorkerCrashed("the session is paused to disk: resume it first")

    async def start_command(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        *,
        memory_bytes: int,
        cpu_seconds: int,
    ) -> Command:
        raise WorkerCrashed("the session is paused to disk: resume it first")

    async def interrupt_interpreter(self, slot: int = 0) -> None:
        return None

    async def kill_interpreter(self, slot: int = 0) -> None:
        return None

    def kill(self) -> None:
        return None

    def close(self) -> None:
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class PauseState:
    """A session's pause: how (None: running), frozen in place or kept on disk, and what
    its last full pause or restore could not keep."""

    paused: PauseMode | None = None
    frozen: bool = False
    at: float | None = None
    """Wall-clock time it was paused."""
    entry: str | None = None
    """Its entry in the data folder, when paused to disk."""
    lost: dict[str, str] = dataclasses.field(default_factory=dict)


SpawnHolder = Callable[[str, Limits], Awaitable[HolderLike]]
"""A session's holder for (tenant, limits): the engine's default or a template's zygote's."""
Respawn = Callable[
    [str, Limits, SandboxNetwork, SpawnHolder | None],
    Awaitable[tuple[HolderLike, SessionNetwork]],
]
"""New processes for a session (tenant, limits, network, who makes its holder: None for the
engine's default): a holder, ready, and its link."""


@dataclasses.dataclass(frozen=True, slots=True)
class Keeper:
    """What a session needs to leave its processes and come back: the data folder's entries,
    and a way to start new processes."""

    store: KeepSafe
    respawn: Respawn


_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")


def entry_name(session_id: str) -> str:
    """A session's entry folder name: its id, or a digest of an id no folder can be named."""
    if _SAFE_NAME.fullmatch(session_id):
        return session_id
    return "h" + hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]

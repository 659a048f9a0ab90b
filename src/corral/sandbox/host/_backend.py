"""The seam between the engine and the sandbox: what the engine needs of zygotes and holders.

``corral.engine.Engine(backend=...)`` takes a :class:`SandboxBackend`. The real one,
:class:`IsolatedBackend`, starts zygote processes that clone workers into namespaces behind
seccomp, in cgroups. :class:`corral.sandbox.InProcessBackend` is its twin for tests: the
same protocol, run in the engine's own process without any isolation (``corral serve``
refuses it). The engine talks to either through these protocols alone, so the type checker
sees a twin drift from the real thing.

Workers are :class:`corral.sandbox.Worker` on both sides: the twin's speak the same framed
protocol on real sockets, so the engine's reader, limits and fitting are the real ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import anyio
import anyio.abc

from corral._uids import UidRange
from corral.sandbox._control_protocol import NO_FILES, Hello, SandboxFiles, StaticLimits

if TYPE_CHECKING:
    from corral.sandbox.host._cgroups import CgroupTree, SandboxCgroup
    from corral.sandbox.host._command import Command
    from corral.sandbox.host._doctor import DoctorReport
    from corral.sandbox.host._worker import Worker

__all__ = ["HolderLike", "IsolatedBackend", "SandboxBackend", "ZygoteLike"]


class HolderLike(Protocol):
    """A session's holder: the keeper of its files and the parent of its interpreter."""

    pid: int
    outer_id: int
    """The host uid and gid the session's files are written as."""
    cgroup: SandboxCgroup | None
    closed: bool

    @property
    def interpreter_alive(self) -> bool:
        """Whether the session's own interpreter (slot 0) runs."""

    def running_interpreters(self) -> int:
        """Its interpreters now: its own and those beside it (E2B's contexts)."""

    @property
    def pidfd(self) -> int | None:
        """The holder's pidfd, whose namespaces are the session's (None in the twin)."""

    async def wait_ready(self) -> None: ...

    def open_data_dir(self) -> int:
        """An O_PATH descriptor of the session's folder, opened before any user code."""

    async def start_interpreter(self, slot: int = 0) -> Worker:
        """Slot 0: the session's own interpreter; another runs beside it."""

    async def start_command(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        *,
        memory_bytes: int,
        cpu_seconds: int,
    ) -> Command: ...

    async def interrupt_interpreter(self, slot: int = 0) -> None: ...

    async def kill_interpreter(self, slot: int = 0) -> None:
        """Slot 0 kills every process of the session but the holder; another slot, that
        interpreter and what it left in its process group."""

    def kill(self) -> None: ...

    def close(self) -> None: ...


class ZygoteLike(Protocol):
    """A source of fresh workers and session holders."""

    dead: anyio.Event
    hello: Hello | None

    @property
    def pid(self) -> int | None: ...

    async def start(self, task_group: anyio.abc.TaskGroup) -> None: ...

    async def spawn(self, *, work_bytes: int | None = None) -> Worker: ...

    async def spawn_ready(self, *, work_bytes: int | None = None) -> Worker: ...

    async def spawn_holder(
        self, disk_bytes: int, *, memory_bytes: int | None = None, group: str | None = None
    ) -> HolderLike: ...

    def kill(self) -> None: ...

    async def aclose(self) -> None: ...


class SandboxBackend(Protocol):
    """What the engine builds its workers from."""

    isolated: bool
    """False for a backend that runs code without isolation (the in-process twin)."""

    def zygote(
        self,
        *,
        preload: tuple[str, ...],
        uids: UidRange,
        static: StaticLimits,
        memory_bytes: int,
        data_dir: str | None,
        prewarm: bool,
        cgroups: CgroupTree | None,
        files: SandboxFiles = NO_FILES,
    ) -> ZygoteLike: ...

    def cgroup_tree(self, *, capacity: int, cpu_quota: float, parent: str) -> CgroupTree:
        """Raises: IsolationError (cgroups cannot be used here; the reason says why)."""

    def doctor(self) -> DoctorReport: ...


class IsolatedBackend:
    """The real sandbox: zygote processes, namespaces, seccomp, a host uid and a cgroup per
    worker."""

    isolated = True

    def zygote(
        self,
        *,
        preload: tuple[str, ...],
        uids: UidRange,
        static: StaticLimits,
        memory_bytes: int,
        data_dir: str | None,
        prewarm: bool,
        cgroups: CgroupTree | None,
        files: SandboxFiles = NO_FILES,
    ) -> ZygoteLike:
        from corral.sandbox.host._zygote import Zygote

        return Zygote(
            preload=preload,
            uids=uids,
            static=static,
            memory_bytes=memory_bytes,
            data_dir=data_dir,
            prewarm=prewarm,
            cgroups=cgroups,
            files=files,
        )

    def cgroup_tree(self, *, capacity: int, cpu_quota: float, parent: str) -> CgroupTree:
        from corral.sandbox.host._cgroups import CgroupTree

        return CgroupTree.create(capacity=capacity, cpu_quota=cpu_quota, parent=parent)

    def doctor(self) -> DoctorReport:
        from corral.sandbox.host._doctor import doctor

        return doctor()

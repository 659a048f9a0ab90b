"""Worker supplies: each one a supervised zygote with its own warm pool of ready workers.

The full zygote has the preload set (numpy, pandas, matplotlib) imported; a lean one has only
the runner. Forking costs in proportion to the parent's memory, so code that imports nothing
beyond the standard library runs from the lean zygote's workers: the same isolation, the same
runtime on disk, a third of the fork cost. Anything else, and every session, uses the full one.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Sequence

import anyio
import anyio.abc

from corral._limits import Limits
from corral._uids import UidRange
from corral.engine._stdlib import stdlib_only
from corral.engine._supervisor import Backoff
from corral.errors import ConfigError, IsolationError, WorkerError
from corral.sandbox import (
    CgroupTree,
    SandboxBackend,
    SandboxFiles,
    StaticLimits,
    WarmPool,
    Worker,
    ZygoteLike,
)

__all__ = ["WorkerSupply", "stdlib_only"]

logger = logging.getLogger("corral.engine")


async def _probe(zygote: ZygoteLike) -> Worker:
    """Refuse to start unless one worker can be built: a host without user namespaces (say)
    must fail here, with a reason, rather than time out every run later. The worker is the
    pool's first."""
    try:
        worker = await zygote.spawn()
        try:
            await worker.wait_ready()
        except BaseException:
            worker.close()
            raise
    except WorkerError as exc:
        await zygote.aclose()
        raise IsolationError(
            f"cannot start an isolated worker ({exc}); `corral doctor` shows what is missing"
        ) from exc
    return worker


def prepare_data_dir(path: str) -> None:
    """Make sure ``path`` is a folder, created if missing (a link is refused).

    Raises:
        ConfigError: it cannot be created, or is not a directory.
    """
    try:
        os.makedirs(path, mode=0o755, exist_ok=True)
        info = os.stat(path, follow_symlinks=False)
    except OSError as exc:
        raise ConfigError(f"cannot use {path} as the session data folder: {exc.strerror}") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"the session data folder {path} is not a directory")


def adopt_data_dir(path: str, uid: int, sandbox: UidRange) -> None:
    """Give a new session the data folder: the folder and what earlier sessions made in it
    (entries owned by a uid of ``sandbox``) become ``uid``'s; others' files keep their owners.

    Called before the session runs any code. Entries are changed through their directory's
    descriptor and never through a link, and links are never followed into.
    """
    first, last = sandbox.first, sandbox.first + sandbox.count
    os.chown(path, uid, uid, follow_symlinks=False)
    for _dir, names, files, dir_fd in os.fwalk(path, follow_symlinks=False):
        for name in (*names, *files):
            try:
                owner = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_uid
                if first <= owner < last and owner != uid:
                    os.chown(name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue


class WorkerSupply:
    """One zygote process, restarted whenever it dies or fails, and its pool of ready workers.

    While it is down (dead, restarting, or failing to come back), ``zygote`` and ``pool`` are
    None and ``failure`` says why; runs then end ``worker_error`` with that reason and the
    restarts continue with backoff. Nothing here ever cancels the engine.
    """

    def __init__(
        self,
        backend: SandboxBackend,
        preload: Sequence[str],
        limits: Limits,
        pool_size: int,
        uids: UidRange,
        session_data_dir: str | None = None,
        *,
        prewarm: bool = True,
    ) -> None:
        self._backend = backend
        self.preload = tuple(preload)
        self.files = SandboxFiles()
        """What every sandbox's root adds to the host's files: the egress CA, the package index."""
        self.cgroups: CgroupTree | None = None
        """The engine's cgroup tree, when in force: every zygote gets a folder in it."""
        self._prewarm = prewarm
        self._uids = uids
        self._session_data_dir = session_data_dir
        self._limits = limits
        self._pool_size = pool_size
        self.zygote: ZygoteLike | None = None
        self.pool: WarmPool | None = None
        self.restarts = 0
        self.failure = ""
        """Why the zygote is down ("" while it is up)."""
        self._running = 0
        self._closed = anyio.Event()

    async def _start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Raises: IsolationError (with doctor's reasons), ZygoteUnavailable, ConfigError (an
        unusable session data folder)."""
        limits = self._limits
        if self._session_data_dir is not None:
            await anyio.to_thread.run_sync(prepare_data_dir, self._session_data_dir)
        static = StaticLimits(
            work_bytes=limits.work_bytes,
            pids=limits.pids,
            file_bytes=limits.file_bytes,
            open_files=limits.open_files,
        )
        zygote = self._backend.zygote(
            preload=self.preload,
            uids=self._uids,
            static=static,
            memory_bytes=limits.memory_bytes,
            data_dir=self._session_data_dir,
            prewarm=self._prewarm,
            cgroups=self.cgroups,
            files=self.files,
        )
        try:
            await zygote.start(task_group)
            probe = await _probe(zygote)
        except IsolationError as exc:
            await zygote.aclose()
            problems = "; ".join((await anyio.to_thread.run_sync(self._backend.doctor)).problems)
            if not problems:
                raise
            raise IsolationError(f"{exc}. corral doctor: {problems}") from exc
        except BaseException:
            with anyio.CancelScope(shield=True):
                await zygote.aclose()
            raise
        pool = WarmPool(zygote, self._pool_size, ready=probe)
        pool.set_running(self._running)
        await pool.run(task_group)
        self.zygote, self.pool = zygote, pool

    def set_running(self, running: int) -> None:
        self._running = running
        if self.pool is not None:
            self.pool.set_running(running)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep the zygote up until cancelled; ``task_status`` is told once the first one is.

        Each incarnation's read loop and refillers share a task group of their own, so a
        failure in any of them ends that incarnation only, and the next one starts after a
        backoff.

        Raises:
            IsolationError, ZygoteUnavailable: the first start failed (the engine refuses to
            start); later failures are logged, reported by ``failure`` and retried.
        """
        backoff = Backoff()
        started = False
        while not self._closed.is_set():
            try:
                async with anyio.create_task_group() as tg:
                    await self._start(tg)
                    assert self.zygote is not None
                    if started:
                        logger.warning("zygote %s is back", self.zygote.pid)
                    else:
                        started = True
                        task_status.started()
                    self.failure = ""
                    backoff.reset()
                    await self.zygote.dead.wait()
                    if self._closed.is_set():
                        return
                    self.failure = f"the zygote (pid {self.zygote.pid}) died; it is restarting"
                    logger.error("zygote %s died; restarting it", self.zygote.pid)
                    tg.cancel_scope.cancel()
            except Exception as exc:
                cause = _sole(exc)
                if not started:
                    raise cause from cause.__cause__  # the original, not the wrapper
                self.failure = f"the zygote cannot be restarted: {cause}"
                logger.error(
                    "zygote restart failed; retrying in %.1f s", backoff.delay, exc_info=cause
                )
            finally:
                with anyio.CancelScope(shield=True):
                    await self._teardown()
            self.restarts += 1
            await backoff.wait()

    async def aclose(self) -> None:
        """Stop the zygote for good (the engine is closing)."""
        self._closed.set()
        await self._teardown()

    async def _teardown(self) -> None:
        pool, zygote = self.pool, self.zygote
        self.pool = self.zygote = None
        if pool is not None:
            pool.close()
        if zygote is not None:
            await zygote.aclose()


def _sole(exc: Exception) -> Exception:
    """The one failure inside (nested) task-group wrappers, or ``exc`` itself."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc

"""The engine's side of the zygote: start it, ask it for workers, hear about exits.

The control channel is a SOCK_SEQPACKET pair carrying ``_control_protocol``'s messages, fds
travelling as SCM_RIGHTS. The engine creates each worker's socket and pipes itself and passes
the worker's ends down, so worker traffic never passes through the zygote. With a cgroup
tree, the zygote gets a folder of its own in it and makes each worker's cgroup there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import os
import signal
import socket
import subprocess
import weakref
from dataclasses import dataclass

import anyio
import anyio.abc

from corral._uids import DEFAULT_UID_RANGE, UidRange
from corral.errors import IsolationError, ZygoteUnavailable
from corral.sandbox._control_protocol import (
    NO_FILES,
    Hello,
    OutOfMemory,
    SandboxFiles,
    Spawn,
    Spawned,
    SpawnRefused,
    StartFailed,
    StaticLimits,
    Sync,
    Synced,
    decode,
)
from corral.sandbox._descriptors import Descriptors
from corral.sandbox._seqpacket import areceive, asend
from corral.sandbox.host._cgroups import CgroupTree, SandboxCgroup
from corral.sandbox.host._holder import Holder
from corral.sandbox.host._launch import DEFAULT_PRELOAD, adopt, launch, zygote_config
from corral.sandbox.host._worker import Worker

__all__ = ["DEFAULT_PRELOAD", "Zygote"]

_DEFAULT_STATIC = StaticLimits(work_bytes=128 << 20, pids=64, file_bytes=64 << 20, open_files=256)
_DEFAULT_MEMORY = 1 << 30  # bytes: Limits' default

logger = logging.getLogger("corral.sandbox")

_START_TIMEOUT = 120.0  # seconds; the first import of pandas and matplotlib can be slow
_SPAWN_TIMEOUT = 10.0  # seconds for the zygote to clone; it only ever forks
_SYNC_TIMEOUT = 2.0  # seconds for the zygote to answer a Sync; it answers between clones
_MAX_OOM_RECORDS = 4096  # reported kills nobody asked for (a worker closed without a run)
# Staged shutdown. Closing the control socket is the zygote's signal to exit, which it does at
# once (os._exit; its workers die with it by their parent-death signal): a healthy zygote is
# gone within the first grace. A wedged one gets SIGTERM, then SIGKILL, which cannot be
# ignored; the last bound only keeps a process stuck in the kernel (D state) from holding
# shutdown forever, and is logged, never silent.
_EXIT_GRACE = 2.0  # seconds after the control socket closes
_TERM_GRACE = 1.0  # seconds after SIGTERM
_REAP_TIMEOUT = 5.0  # seconds after SIGKILL


class _Reaped(anyio.abc.Process):
    """A zygote started by ``subprocess.Popen`` (perhaps before an event loop ran), waited
    for through a pidfd. Signals go through ``Popen``, which never signals a reaped pid."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        # Opened now, not when waiting: a descriptor opened in aclose could take the number of
        # the control socket just closed, which the event loop may still be watching.
        self._pidfd: int | None = os.pidfd_open(popen.pid)
        self._waiting = anyio.Lock()  # one waiter on the descriptor at a time

    async def wait(self) -> int:
        async with self._waiting:
            while (code := self._popen.poll()) is None:
                assert self._pidfd is not None  # closed only once it has been reaped
                await anyio.wait_readable(self._pidfd)  # readable once it has exited
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            return code

    async def aclose(self) -> None:
        await self.wait()

    def terminate(self) -> None:
        self._popen.terminate()

    def kill(self) -> None:
        self._popen.kill()

    def send_signal(self, signal: int) -> None:
        self._popen.send_signal(signal)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    @property
    def stdin(self) -> None:
        return None

    @property
    def stdout(self) -> None:
        return None

    @property
    def stderr(self) -> None:
        return None


@dataclass(slots=True)
class _Pending:
    """A spawn the zygote has not answered yet."""

    done: anyio.Event
    spawned: Spawned | None = None
    pidfd: int | None = None
    error: str = ""


@dataclass(slots=True)
class _Cloned:
    """A new process and the engine's ends of its socket and pipes."""

    spawned: Spawned
    pidfd: int
    sock: socket.socket
    out: int
    err: int


class Zygote:
    """One running zygote and the workers it has spawned for us."""

    def __init__(
        self,
        *,
        preload: tuple[str, ...] = DEFAULT_PRELOAD,
        uids: UidRange = DEFAULT_UID_RANGE,
        static: StaticLimits = _DEFAULT_STATIC,
        memory_bytes: int = _DEFAULT_MEMORY,
        data_dir: str | None = None,
        prewarm: bool = True,
        cgroups: CgroupTree | None = None,
        files: SandboxFiles = NO_FILES,
    ) -> None:
        self._files = files
        """What its template adds to the host's files (CA, package index, wheelhouse)."""
        self._prewarm = prewarm
        """False for a zygote that serves one run: it imports IPython on first use and
        skips the warm-up that many workers share."""
        self._data_dir = data_dir
        """A host folder session holders bind as their data dir instead of a tmpfs."""
        self._static = static
        self._memory_bytes = memory_bytes
        """Every new sandbox's memory bound (its cgroup's), until a run asks for another."""
        self._preload = preload
        self._uids = uids
        self._cgroups = cgroups
        self._own_uid: int | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._oom_at_exit: dict[int, int] = {}
        """Kills the zygote reported for reaped workers, by pid, until asked for."""
        self._syncs: dict[int, anyio.Event] = {}
        # The live one-shot workers by pid, for diagnostics; a closed worker drops out.
        self._workers: weakref.WeakValueDictionary[int, Worker] = weakref.WeakValueDictionary()
        self._process: anyio.abc.Process | None = None
        self._ctl: socket.socket | None = None
        self.dead = anyio.Event()
        self.hello: Hello | None = None

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Start the zygote and wait until it has preloaded and built the sandbox root.

        Raises:
            IsolationError: the zygote could not build the sandbox on this host.
            ZygoteUnavailable: it died or did not answer in time.
        """
        config = await anyio.to_thread.run_sync(
            lambda: zygote_config(
                preload=self._preload,
                uids=self._uids,
                data_dir=self._data_dir,
                prewarm=self._prewarm,
                files=self._files,
            )
        )
        launched = adopt(config) or launch(config)
        self._process, self._ctl = _Reaped(launched.process), launched.ctl
        self._own_uid = launched.uid
        with anyio.move_on_after(_START_TIMEOUT):
            packet, fds = await self._receive()
            Descriptors(fds).close()
            message = None if packet is None else decode(packet, Hello, StartFailed)
            if message is None:
                raise ZygoteUnavailable("the zygote exited during start-up")
            if isinstance(message, StartFailed):
                raise IsolationError(
                    f"cannot build the sandbox: {message.error} (run `corral doctor`)"
                )
            self.hello = message
            if self._cgroups is not None:
                await self._delegate(self._cgroups, launched.uid, launched.process.pid)
            task_group.start_soon(self._read_loop)
            return
        self.kill()
        raise ZygoteUnavailable("the zygote did not start in time")

    async def _delegate(self, tree: CgroupTree, uid: int, pid: int) -> None:
        """Give the zygote its cgroup folders (before its first spawn).

        Raises:
            IsolationError: they could not be made.
        """
        assert self._ctl is not None
        try:
            message, fds = await anyio.to_thread.run_sync(tree.delegate, uid, pid)
        except OSError as exc:
            self.kill()
            raise IsolationError(f"cannot give the zygote its cgroups: {exc}") from exc
        with Descriptors(fds):
            await asend(self._ctl, message, fds)

    async def _receive(self) -> tuple[bytes | None, list[int]]:
        if self._ctl is None:  # closed while the reader was between messages
            return None, []
        return await areceive(self._ctl)

    async def _read_loop(self) -> None:
        try:
            while True:
                packet, fds = await self._receive()
                with Descriptors(fds) as held:
                    if packet is None:
                        return
                    message = decode(packet, Spawned, SpawnRefused, OutOfMemory, Synced)
                    if isinstance(message, OutOfMemory):
                        if len(self._oom_at_exit) >= _MAX_OOM_RECORDS:
                            self._oom_at_exit.pop(next(iter(self._oom_at_exit)))
                        self._oom_at_exit[message.pid] = message.kills
                        continue
                    if isinstance(message, Synced):
                        if (synced := self._syncs.get(message.n)) is not None:
                            synced.set()
                        continue
                    pending = None if message is None else self._pending.get(message.id)
                    if message is None or pending is None:
                        continue
                    if isinstance(message, SpawnRefused):
                        pending.error = message.error
                    elif len(fds) == 1:
                        pending.spawned, pending.pidfd = message, held.take(fds[0])
                    else:  # out of descriptors (EMFILE truncates them): this spawn fails
                        pending.error = "no descriptor arrived (the server is out of them)"
                    pending.done.set()
        finally:
            self._mark_dead()

    def _mark_dead(self) -> None:
        self.dead.set()
        for pending in self._pending.values():
            pending.done.set()
        for synced in self._syncs.values():
            synced.set()

    async def _kills_at_exit(self, pid: int) -> int:
        """The kills the zygote reported when it reaped worker ``pid`` (0 if none): asked
        after the zygote has caught up with everything before this question."""
        if self._ctl is not None and not self.dead.is_set():
            number = next(self._ids)
            synced = self._syncs[number] = anyio.Event()
            try:
                await asend(self._ctl, Sync(n=number))
                with anyio.move_on_after(_SYNC_TIMEOUT):
                    await synced.wait()
            except OSError:
                pass
            finally:
                self._syncs.pop(number, None)
        return self._oom_at_exit.pop(pid, 0)

    async def _clone(self, request: Spawn, kind: socket.SocketKind) -> _Cloned:
        if self.dead.is_set() or self._ctl is None:
            raise ZygoteUnavailable("the zygote is not running")
        pending = _Pending(anyio.Event())
        self._pending[request.id] = pending
        ours, theirs = socket.socketpair(socket.AF_UNIX, kind)
        with Descriptors() as held:
            try:
                out_r, out_w = held.pipe()
                err_r, err_w = held.pipe()
                try:
                    await asend(self._ctl, request, [theirs.fileno(), out_w, err_w])
                except OSError as exc:
                    raise ZygoteUnavailable(f"the zygote is gone: {exc}") from exc
                finally:
                    theirs.close()
                    os.close(held.take(out_w))
                    os.close(held.take(err_w))
                with anyio.move_on_after(_SPAWN_TIMEOUT):
                    await pending.done.wait()
                if pending.spawned is None or pending.pidfd is None:
                    why = pending.error or "it did not answer"
                    raise ZygoteUnavailable(f"the zygote could not spawn a worker: {why}")
            except BaseException:
                ours.close()
                if pending.pidfd is not None:
                    os.close(pending.pidfd)
                raise
            finally:
                self._pending.pop(request.id, None)
            return _Cloned(pending.spawned, pending.pidfd, ours, held.take(out_r), held.take(err_r))

    def _sandbox_cgroup(
        self, spawned: Spawned, *, group: str | None, memory_bytes: int, pids: int
    ) -> SandboxCgroup | None:
        if self._cgroups is None or self._own_uid is None:
            return None
        return self._cgroups.sandbox(
            self._own_uid,
            spawned.uid,
            group=group,
            memory_bytes=memory_bytes,
            pids=pids,
            kills_at_exit=functools.partial(self._kills_at_exit, spawned.pid),
        )

    def _spawn_request(
        self,
        static: StaticLimits,
        memory_bytes: int,
        *,
        session_disk_bytes: int | None = None,
        group: str | None = None,
    ) -> Spawn:
        tree = self._cgroups
        return Spawn(
            id=next(self._ids),
            static=static,
            session_disk_bytes=session_disk_bytes,
            cgroup=() if tree is None else tree.knobs(memory_bytes=memory_bytes, pids=static.pids),
            cgroup_group=None if tree is None else group,
        )

    async def spawn(self, *, work_bytes: int | None = None) -> Worker:
        """Clone a new one-shot worker; it is isolated but may still be starting up.

        Args:
            work_bytes: size of its /work and /tmp when not the pool's (fixed at creation).

        Raises:
            ZygoteUnavailable: the zygote is gone or did not answer.
        """
        static = self._static
        if work_bytes is not None:
            static = dataclasses.replace(static, work_bytes=work_bytes)
        request = self._spawn_request(static, self._memory_bytes)
        cloned = await self._clone(request, socket.SOCK_STREAM)
        uid = cloned.spawned.uid
        worker = Worker(
            cloned.spawned.pid, cloned.pidfd, cloned.sock, cloned.out, cloned.err, outer_id=uid
        )
        worker.cgroup = self._sandbox_cgroup(
            cloned.spawned, group=None, memory_bytes=self._memory_bytes, pids=static.pids
        )
        self._workers[worker.pid] = worker
        return worker

    async def spawn_ready(self, *, work_bytes: int | None = None) -> Worker:
        """:meth:`spawn`, then wait until the worker is ready; a worker that fails is closed.

        Raises:
            ZygoteUnavailable: the zygote is gone or did not answer.
            WorkerError: the worker died or misbehaved while it started.
        """
        worker = await self.spawn(work_bytes=work_bytes)
        try:
            await worker.wait_ready()
        except BaseException:
            worker.close()
            raise
        if worker.cgroup is not None:
            worker.cgroup.prime()
        return worker

    async def spawn_holder(
        self, disk_bytes: int, *, memory_bytes: int | None = None, group: str | None = None
    ) -> Holder:
        """Clone a session holder with a ``disk_bytes`` tmpfs at ``/mnt/data``.

        Args:
            memory_bytes: the whole session's memory bound (the zygote's default when None).
            group: the cgroup group it shares with its key's other sessions.

        Raises:
            ZygoteUnavailable: the zygote is gone or did not answer.
        """
        memory = self._memory_bytes if memory_bytes is None else memory_bytes
        request = self._spawn_request(
            self._static, memory, session_disk_bytes=disk_bytes, group=group
        )
        cloned = await self._clone(request, socket.SOCK_SEQPACKET)
        uid = cloned.spawned.uid
        holder = Holder(
            cloned.spawned.pid, cloned.pidfd, cloned.sock, cloned.out, cloned.err, outer_id=uid
        )
        holder.cgroup = self._sandbox_cgroup(
            cloned.spawned, group=group, memory_bytes=memory, pids=self._static.pids
        )
        return holder

    def kill(self) -> None:
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()

    async def aclose(self) -> None:
        """Stop the zygote in stages: close its socket, then SIGTERM, then SIGKILL; reap it;
        remove its cgroup folders."""
        if self._ctl is not None:
            anyio.notify_closing(self._ctl)
            self._ctl.close()
            self._ctl = None
        process = self._process
        if process is not None:
            with anyio.CancelScope(shield=True):
                for grace, stop in (
                    (_EXIT_GRACE, None),
                    (_TERM_GRACE, signal.SIGTERM),
                    (_REAP_TIMEOUT, signal.SIGKILL),
                ):
                    if stop is not None and process.returncode is None:
                        with contextlib.suppress(ProcessLookupError):
                            process.send_signal(stop)
                    with anyio.move_on_after(grace):
                        await process.wait()
                    if process.returncode is not None:
                        break
                else:
                    logger.error("zygote %s did not exit after SIGKILL", process.pid)
                if self._cgroups is not None and self._own_uid is not None:
                    await anyio.to_thread.run_sync(self._cgroups.remove_zygote, self._own_uid)
        self._mark_dead()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

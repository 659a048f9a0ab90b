"""The engine's side of the zygote: start it, ask it for workers, hear about exits.

The control channel is a SOCK_SEQPACKET pair: one JSON message per packet, fds travelling as
SCM_RIGHTS. The engine creates each worker's socket and pipes itself and passes the worker's
ends down, so worker traffic never passes through the zygote.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import socket
import subprocess
import weakref
from typing import Any

import anyio
import anyio.abc

from corral._uids import DEFAULT_UID_RANGE, UidRange
from corral.errors import IsolationError, ZygoteUnavailable
from corral.sandbox._seqpacket import areceive, asend
from corral.sandbox.host._holder import Holder
from corral.sandbox.host._launch import DEFAULT_PRELOAD, adopt, launch, zygote_config
from corral.sandbox.host._worker import Worker

__all__ = ["DEFAULT_PRELOAD", "Zygote"]

logger = logging.getLogger("corral.sandbox")

_START_TIMEOUT = 120.0  # seconds; the first import of pandas and matplotlib can be slow
_SPAWN_TIMEOUT = 10.0  # seconds for the zygote to clone; it only ever forks
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


class Zygote:
    """One running zygote and the workers it has spawned for us."""

    def __init__(
        self,
        *,
        preload: tuple[str, ...] = DEFAULT_PRELOAD,
        uids: UidRange = DEFAULT_UID_RANGE,
        static: dict[str, int] | None = None,
        data_dir: str | None = None,
        prewarm: bool = True,
    ) -> None:
        self._prewarm = prewarm
        """False for a zygote that serves one run: it imports IPython on first use and
        skips the warm-up that many workers share."""
        self._data_dir = data_dir
        """A host folder session holders bind as their data dir instead of a tmpfs."""
        self._static = static or {
            "work_bytes": 128 << 20,
            "pids": 64,
            "file_bytes": 64 << 20,
            "open_files": 256,
        }
        self._preload = preload
        self._uids = uids
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[anyio.Event, list[Any]]] = {}
        # The live one-shot workers by pid, for diagnostics; a closed worker drops out.
        self._workers: weakref.WeakValueDictionary[int, Worker] = weakref.WeakValueDictionary()
        self._process: anyio.abc.Process | None = None
        self._ctl: socket.socket | None = None
        self.dead = anyio.Event()
        self.hello: dict[str, Any] = {}

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
            )
        )
        launched = adopt(config) or launch(config)
        self._process, self._ctl = _Reaped(launched.process), launched.ctl
        with anyio.move_on_after(_START_TIMEOUT):
            message, _ = await self._receive()
            if message is None:
                raise ZygoteUnavailable("the zygote exited during start-up")
            if message.get("t") == "failed":
                raise IsolationError(
                    f"cannot build the sandbox: {message.get('error')} (run `corral doctor`)"
                )
            self.hello = message
            task_group.start_soon(self._read_loop)
            return
        self.kill()
        raise ZygoteUnavailable("the zygote did not start in time")

    async def _receive(self) -> tuple[dict[str, Any] | None, list[int]]:
        if self._ctl is None:  # closed while the reader was between messages
            return None, []
        return await areceive(self._ctl)

    async def _read_loop(self) -> None:
        try:
            while True:
                message, fds = await self._receive()
                if message is None:
                    return
                kind = message.get("t")
                if kind == "spawned" and message.get("id") in self._pending:
                    event, box = self._pending[message["id"]]
                    if fds:
                        box.extend([message["pid"], fds[0], message["uid"]])
                    else:  # out of descriptors (EMFILE truncates them): this spawn fails
                        box.append("no descriptor arrived (the server is out of them)")
                    event.set()
                elif kind == "refused" and message.get("id") in self._pending:
                    event, box = self._pending[message["id"]]
                    box.append(str(message.get("error")))
                    event.set()
                else:
                    for fd in fds:
                        os.close(fd)
        finally:
            self._mark_dead()

    def _mark_dead(self) -> None:
        self.dead.set()
        for event, _ in self._pending.values():
            event.set()

    async def _clone(
        self, message: dict[str, Any], kind: socket.SocketKind
    ) -> tuple[int, int, socket.socket, int, int, int]:
        if self.dead.is_set() or self._ctl is None:
            raise ZygoteUnavailable("the zygote is not running")
        ident = next(self._ids)
        ours, theirs = socket.socketpair(socket.AF_UNIX, kind)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        event = anyio.Event()
        box: list[Any] = []
        self._pending[ident] = (event, box)
        try:
            try:
                await asend(
                    self._ctl,
                    {"t": "spawn", "id": ident, "static": self._static, **message},
                    [theirs.fileno(), out_w, err_w],
                )
            except OSError as exc:
                raise ZygoteUnavailable(f"the zygote is gone: {exc}") from exc
            finally:
                theirs.close()
                os.close(out_w)
                os.close(err_w)
            with anyio.move_on_after(_SPAWN_TIMEOUT):
                await event.wait()
            if not box:
                raise ZygoteUnavailable("the zygote did not spawn a worker")
            if len(box) == 1:
                raise ZygoteUnavailable(f"the zygote could not spawn a worker: {box[0]}")
        except BaseException:
            ours.close()
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            self._pending.pop(ident, None)
        return int(box[0]), int(box[1]), ours, out_r, err_r, int(box[2])

    async def spawn(self, *, work_bytes: int | None = None) -> Worker:
        """Clone a new one-shot worker; it is isolated but may still be starting up.

        Args:
            work_bytes: size of its /work and /tmp when not the pool's (fixed at creation).

        Raises:
            ZygoteUnavailable: the zygote is gone or did not answer.
        """
        extra = {} if work_bytes is None else {"static": {**self._static, "work_bytes": work_bytes}}
        pid, pidfd, sock, out_r, err_r, uid = await self._clone(extra, socket.SOCK_STREAM)
        worker = Worker(pid, pidfd, sock, out_r, err_r, outer_id=uid)
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
        return worker

    async def spawn_holder(self, disk_bytes: int) -> Holder:
        """Clone a session holder with a ``disk_bytes`` tmpfs at ``/mnt/data``.

        Raises:
            ZygoteUnavailable: the zygote is gone or did not answer.
        """
        pid, pidfd, sock, out_r, err_r, uid = await self._clone(
            {"session": True, "disk_bytes": disk_bytes}, socket.SOCK_SEQPACKET
        )
        return Holder(pid, pidfd, sock, out_r, err_r, outer_id=uid)

    def kill(self) -> None:
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()

    async def aclose(self) -> None:
        """Stop the zygote in stages: close its socket, then SIGTERM, then SIGKILL; reap it."""
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
        self._mark_dead()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

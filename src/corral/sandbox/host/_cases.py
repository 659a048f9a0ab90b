"""The engine's handle on a case server: a fresh worker that runs one program's many cases.

See ``corral.sandbox.inside._cases`` for what the server does and why each case stays fresh.
Here: the engine makes each case's protocol socket and output pipes itself and passes the
child's ends down with ``CaseStart``, so a case's frames and output never mix with another's,
EOF on them means the case's processes are gone, and every frame is read by the ordinary
bounded ``Worker.execute`` against that case's own limits. The server's only message back,
``CaseEnded``, is bounded before it is read and checked for shape. Whatever goes wrong with
the server itself (a bad or late answer, EOF) retires it: it is killed by its pidfd, which
takes its whole pid namespace with it.
"""

from __future__ import annotations

import os
import socket

import anyio

from corral.errors import WorkerCrashed, WorkerError
from corral.sandbox._case_protocol import (
    CaseEnded,
    CasesRequest,
    CaseStart,
    CaseStop,
    Launch,
    decode_ended,
    encode_case_message,
)
from corral.sandbox._descriptors import Descriptors
from corral.sandbox.host._worker import Worker

__all__ = ["CaseServer"]


class CaseServer:
    """A fresh worker turned case server for one program; one case at a time."""

    def __init__(self, worker: Worker, *, work_bytes: int) -> None:
        self.worker = worker
        self.work_bytes = work_bytes
        """The size of the worker's /work and /tmp, fixed when it was made."""
        self.retired = False
        """Set once the server may serve no further case (killed, or told us so)."""
        self._stopping = False

    @property
    def pid(self) -> int:
        return self.worker.pid

    async def prepare(self, code: str, launch: Launch | None = None) -> None:
        """Make the (ready) worker a case server for ``code``, or one whose cases exec
        ``launch`` (``code`` then only names the program).

        Raises:
            WorkerCrashed: it is gone.
        """
        await self.worker.send(encode_case_message(CasesRequest(code, launch)))

    async def start(self, seconds: float) -> Worker:
        """Start a case; its handle, on which ``execute`` runs the case's request (the
        caller closes it once ``stop`` has returned).

        The server kills the case on its own ``seconds`` (plus a margin) from now.

        Raises:
            WorkerCrashed: the server is gone.
            OSError: no descriptors for the case (EMFILE and the like).
        """
        if self.retired:
            raise WorkerCrashed("the case server is retired")
        if self._stopping:
            raise RuntimeError("the last case has not ended: call end_stop first")
        # No task waits on any of these yet, so they are closed without notify_closing.
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with Descriptors() as held:
            try:
                out_r, out_w = held.pipe()
                err_r, err_w = held.pipe()
                try:
                    await self.worker.send_with(
                        encode_case_message(CaseStart(seconds)), [theirs.fileno(), out_w, err_w]
                    )
                except BaseException:
                    self.retire()  # half a frame may have gone: the stream is no longer usable
                    raise
            except BaseException:
                ours.close()
                raise
            finally:
                theirs.close()
            os.close(held.take(out_w))
            os.close(held.take(err_w))
            out_r, err_r = held.take(out_r), held.take(err_r)
        case = Worker(
            self.pid, None, ours, out_r, err_r, outer_id=self.worker.outer_id, signaller=_ignore
        )
        case.cgroup = self.worker.cgroup  # the server's: every case is its child
        return case

    async def stop(self, grace: float) -> CaseEnded | None:
        """End the current case: kill what is left of it, wait for the server to restore
        its folders. None when the server failed or missed ``grace`` seconds: it is then
        retired (killed). Shielded: a cancelled caller must still leave the server usable
        or dead. The case's handle stays open: what its processes wrote before they died
        is still in its pipes."""
        await self.begin_stop(grace)
        return await self.end_stop(grace)

    async def begin_stop(self, grace: float) -> None:
        """Tell the server to end the current case, without waiting for it to be done
        (``end_stop`` waits); the server kills, reaps and restores meanwhile. Shielded, and
        retires the server when it does not take the message within ``grace`` seconds."""
        if self.retired or self._stopping:
            return
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(grace):
                try:
                    await self.worker.send(encode_case_message(CaseStop()))
                    self._stopping = True
                    return
                except WorkerError:
                    pass
        self.retire()

    async def end_stop(self, grace: float) -> CaseEnded | None:
        """Wait for the server's answer to ``begin_stop``: None, and the server retired, when
        it failed or missed ``grace`` seconds or could not restore its folders."""
        if self.retired or not self._stopping:
            return None
        with anyio.CancelScope(shield=True):
            ended: CaseEnded | None = None
            with anyio.move_on_after(grace):
                try:
                    ended = await self._ended()
                except WorkerError:
                    ended = None
        self._stopping = False
        if ended is None or not ended.clean:
            self.retire()
        return ended

    async def _ended(self) -> CaseEnded:
        return decode_ended(await self.worker.read_control())

    def retire(self) -> None:
        """Kill the server (and so every process of its namespace); idempotent."""
        self.retired = True
        self.worker.close()


def _ignore(_signum: int) -> None:
    """A case is ended by ``CaseServer.stop``, never by a signal from the engine."""

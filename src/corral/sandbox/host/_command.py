"""The engine's handle on a command running in a session's sandbox (``inside/_command``).

Everything read here comes from the sandbox: output is read in bounded chunks as it arrives,
and the status pipe, written by the holder, is parsed as at most two short decimal lines.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

import anyio

from corral.errors import WorkerCrashed
from corral.sandbox.host._worker import release

__all__ = ["Command"]

_READ_CHUNK = 64 * 1024  # bytes per read of a command's output
_STATUS_BYTES = 64  # the status pipe carries "<pid>\n<exit code>\n" and nothing else


class Command:
    """A started command: its pid in the sandbox, its pipes, its exit code once it ends."""

    def __init__(
        self,
        stdin: int,
        stdout: int,
        stderr: int,
        status: int,
        signaller: Callable[[int, int], None],
    ) -> None:
        for fd in (stdin, stdout, stderr, status):
            os.set_blocking(fd, False)
        self._stdin: int | None = stdin
        self._out: int | None = stdout
        self._err: int | None = stderr
        self._status = status
        self._status_text = b""
        self._signaller = signaller
        self.pid = 0
        self.exit_code: int | None = None

    async def _status_line(self) -> int | None:
        while b"\n" not in self._status_text:
            await anyio.wait_readable(self._status)
            try:
                chunk = os.read(self._status, _STATUS_BYTES)
            except BlockingIOError:
                continue
            if not chunk:
                return None
            self._status_text += chunk
            if len(self._status_text) > _STATUS_BYTES:
                return None
        line, _, self._status_text = self._status_text.partition(b"\n")
        try:
            return int(line)
        except ValueError:
            return None

    async def started(self) -> int:
        """The command's pid in the sandbox.

        Raises:
            WorkerCrashed: the holder refused it (too many commands) or is gone.
        """
        pid = await self._status_line()
        if pid is None or pid <= 1:
            raise WorkerCrashed("the session did not start the command")
        self.pid = pid
        return pid

    async def read(self, stream: str) -> bytes:
        """The next chunk of ``stdout`` or ``stderr``; ``b""`` once that stream has ended."""
        fd = self._out if stream == "stdout" else self._err
        if fd is None:
            return b""
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                continue
            if not chunk:
                self._close_stream(stream)
            return chunk

    def _close_stream(self, stream: str) -> None:
        fd = self._out if stream == "stdout" else self._err
        if fd is not None:
            os.close(fd)
        if stream == "stdout":
            self._out = None
        else:
            self._err = None

    async def write_stdin(self, data: bytes) -> None:
        """Raises: BrokenPipeError once stdin is closed (by us or by the command)."""
        view = memoryview(data)
        while view:
            fd = self._stdin
            if fd is None:
                raise BrokenPipeError("the command's stdin is closed")
            await anyio.wait_writable(fd)
            if self._stdin != fd:
                continue
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                continue

    def close_stdin(self) -> None:
        if self._stdin is not None:
            fd, self._stdin = self._stdin, None
            release(fd)  # a write waiting on it (another request) ends, never meets a reused fd

    async def wait(self) -> int:
        """The exit code (negative: the signal that ended it).

        Raises:
            WorkerCrashed: the session ended without reporting it.
        """
        if self.exit_code is None:
            code = await self._status_line()
            if code is None:
                raise WorkerCrashed("the session ended while the command ran")
            self.exit_code = code
        return self.exit_code

    def send_signal(self, signum: int = signal.SIGKILL) -> None:
        if self.pid and self.exit_code is None:
            self._signaller(self.pid, signum)

    def close(self) -> None:
        """Release the pipes; the command is killed if it still runs."""
        self.send_signal(signal.SIGKILL)
        self.close_stdin()
        self._close_stream("stdout")
        self._close_stream("stderr")
        with contextlib.suppress(OSError):
            os.close(self._status)
        self._status = -1

"""A terminal inside the sandbox: E2B's ``pty.create`` runs ``bash`` on a real pty.

Run as ``python -m corral.sandbox.inside._pty COLS ROWS PROGRAM ARGS...`` (a command of the
session, as the sandbox's user): it opens a pty on the session's own devpts, starts the
program on it as the leader of a new session with the pty as its controlling terminal, and
relays between the pty and its own pipes. What the terminal shows goes to stdout as it comes.
Its stdin carries frames from the engine: ``D`` + 4-byte length + bytes typed at the
terminal, or ``R`` + 2-byte columns + 2-byte rows (a resize; the program gets SIGWINCH).
When the program exits, so does this, with its status; killed, the pty closes and the
program gets SIGHUP, as a terminal's would.
"""

from __future__ import annotations

import errno
import fcntl
import os
import selectors
import signal
import struct
import sys
import termios

__all__ = ["DATA", "RESIZE", "data_frame", "main", "resize_frame"]

DATA = b"D"
RESIZE = b"R"
_HEADER = struct.Struct("!cI")
_SIZE = struct.Struct("!HH")
_READ = 64 * 1024
_MAX_FRAME = 1 << 20  # bytes of one frame's data; more is no frame of the engine's


def data_frame(data: bytes) -> bytes:
    return _HEADER.pack(DATA, len(data)) + data


def resize_frame(cols: int, rows: int) -> bytes:
    return RESIZE + _SIZE.pack(cols, rows)


def _set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _spawn(argv: list[str], cols: int, rows: int) -> tuple[int, int]:
    master, slave = os.openpty()
    _set_size(slave, cols, rows)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(master)
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            for target in (0, 1, 2):
                os.dup2(slave, target)
            if slave > 2:
                os.close(slave)
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.execvp(argv[0], argv)  # noqa: S606 - the program asked for, in the sandbox
        except OSError as exc:
            os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
        os._exit(127)
    os.close(slave)
    return pid, master


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


class _Frames:
    """The engine's frames from stdin, as they complete."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[bytes, bytes]]:
        self._buffer += chunk
        frames: list[tuple[bytes, bytes]] = []
        while self._buffer:
            kind = bytes(self._buffer[:1])
            if kind == RESIZE:
                if len(self._buffer) < 1 + _SIZE.size:
                    break
                frames.append((RESIZE, bytes(self._buffer[1 : 1 + _SIZE.size])))
                del self._buffer[: 1 + _SIZE.size]
            elif kind == DATA:
                if len(self._buffer) < _HEADER.size:
                    break
                _, length = _HEADER.unpack_from(self._buffer)
                if length > _MAX_FRAME:
                    raise ValueError("a frame past its bound")
                if len(self._buffer) < _HEADER.size + length:
                    break
                frames.append((DATA, bytes(self._buffer[_HEADER.size : _HEADER.size + length])))
                del self._buffer[: _HEADER.size + length]
            else:
                raise ValueError(f"no such frame: {kind!r}")
        return frames


def _relay(pid: int, master: int) -> None:
    selector = selectors.DefaultSelector()
    selector.register(master, selectors.EVENT_READ)
    selector.register(0, selectors.EVENT_READ)
    frames = _Frames()
    while True:
        for key, _ in selector.select():
            if key.fd == master:
                try:
                    data = os.read(master, _READ)
                except OSError as exc:  # EIO: every holder of the slave side has closed it
                    if exc.errno != errno.EIO:
                        raise
                    data = b""
                if not data:
                    return
                _write_all(1, data)
            else:
                chunk = os.read(0, _READ)
                if not chunk:
                    selector.unregister(0)  # stdin closed: the terminal runs on, unfed
                    continue
                for kind, payload in frames.feed(chunk):
                    if kind == DATA:
                        _write_all(master, payload)
                    else:
                        cols, rows = _SIZE.unpack(payload)
                        _set_size(master, max(cols, 1), max(rows, 1))


def main(args: list[str]) -> int:
    cols, rows, *argv = args
    pid, master = _spawn(argv, int(cols), int(rows))
    try:
        _relay(pid, master)
    finally:
        os.close(master)
    _, status = os.waitpid(pid, 0)
    return (
        os.waitstatus_to_exitcode(status) & 0xFF
        if os.WIFEXITED(status)
        else 128 + (os.WTERMSIG(status))
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Descriptors that travel between corral's processes, and the one way they are closed.

Descriptors pass as SCM_RIGHTS on the control channels (the zygote's, a holder's) and on a
worker's protocol socket (its inputs descriptor, a case's three). :func:`rights` packs them
for ``sendmsg``, :func:`received` unpacks what ``recvmsg`` returned. A receiver owns every
descriptor that arrives, wanted or not, so each path that takes some keeps them in a
:class:`Descriptors`: closed together on the way out unless handed on with ``take``. That
replaces a ladder of ``os.close`` calls in every ``except``.

Standard library only: the zygote and the workers import it.
"""

from __future__ import annotations

import array
import os
import socket
from collections.abc import Iterable
from types import TracebackType

__all__ = ["FD_BYTES", "Descriptors", "ancillary_space", "received", "rights"]

FD_BYTES = array.array("i").itemsize
"""Bytes of one descriptor number in an SCM_RIGHTS message."""

Ancillary = list[tuple[int, int, bytes]]


def rights(fds: Iterable[int]) -> Ancillary:
    """The ancillary data that passes ``fds`` (none: no ancillary data at all)."""
    packed = array.array("i", fds)
    if not packed:
        return []
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, packed.tobytes())]


def ancillary_space(count: int) -> int:
    """The ``ancbufsize`` that receives up to ``count`` descriptors (more are cut, closed)."""
    return socket.CMSG_SPACE(count * FD_BYTES)


def received(ancdata: Iterable[tuple[int, int, bytes]]) -> list[int]:
    """Every descriptor ``recvmsg`` handed us, in order; the caller owns them all."""
    fds = array.array("i")
    for level, kind, raw in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(raw[: len(raw) - len(raw) % FD_BYTES])
    return list(fds)


class Descriptors:
    """Descriptors owned together: ``close`` (or leaving the ``with`` block) closes every one
    still held; ``take`` hands one on, after which it is the taker's to close."""

    __slots__ = ("_held",)

    def __init__(self, fds: Iterable[int] = ()) -> None:
        self._held: list[int] = list(fds)

    def add(self, fd: int) -> int:
        self._held.append(fd)
        return fd

    def pipe(self) -> tuple[int, int]:
        """A close-on-exec pipe, both ends held."""
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        return self.add(read_end), self.add(write_end)

    def take(self, fd: int) -> int:
        """No longer ours: ``fd`` is someone else's to close (raises ValueError if not held)."""
        self._held.remove(fd)
        return fd

    def take_first(self) -> int:
        """The first descriptor still held, now the caller's (IndexError when none is)."""
        return self._held.pop(0)

    def take_all(self) -> list[int]:
        held, self._held = self._held, []
        return held

    def close(self) -> None:
        held, self._held = self._held, []
        for fd in held:
            try:  # noqa: SIM105 - no context manager per descriptor on the zygote's spawn path
                os.close(fd)
            except OSError:
                pass

    def __len__(self) -> int:
        return len(self._held)

    def __enter__(self) -> Descriptors:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

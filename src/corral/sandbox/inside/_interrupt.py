"""A session interpreter's interrupts: SIGINT is a KeyboardInterrupt in the user's code only.

The engine interrupts a run past its deadline (or whose caller left) and waits a short grace
for the interpreter's report, then keeps the interpreter with its variables. The signal may
land anywhere. In the user's code (armed) it raises, once. Between requests it is the next
run's if that request is already waiting on the protocol socket, and while a request is set
up (begun, not yet armed) it is this run's: either way it is kept and raised as the code
starts, so a run stopped before its code began still ends. Anywhere else (the runner's
report, an idle interpreter with nothing to read) it is ignored: the runner's own work is
never broken off, and the signal of an interrupt that came too late for its run never
reaches the next one (the engine waits until the signal is pending before it reads the
report, so the interpreter meets it before the next request is sent). The code may replace
the handler or block the signal; each run installs and unblocks it again, and a run that does
not come back within the grace is ended by a restart instead.
"""

from __future__ import annotations

import select
import signal
import types

__all__ = ["arm", "begin", "disarm", "install"]

_IDLE, _BEGUN, _ARMED = 0, 1, 2
_state = _IDLE
_pending = False
_protocol_fd = -1


def _on_sigint(signum: int, frame: types.FrameType | None) -> None:
    global _state, _pending
    if _state == _ARMED:
        _state = _IDLE  # one KeyboardInterrupt per run, never one in the runner's cleanup
        raise KeyboardInterrupt
    if _state == _BEGUN or (_protocol_fd >= 0 and _request_waiting()):
        _pending = True


def _request_waiting() -> bool:
    try:
        readable, _, _ = select.select([_protocol_fd], [], [], 0)
    except (OSError, ValueError):
        return False
    return bool(readable)


def install(protocol_fd: int | None = None) -> None:
    """Ignore SIGINT (unless the next request waits on ``protocol_fd``) until a request
    begins."""
    global _protocol_fd
    if protocol_fd is not None:
        _protocol_fd = protocol_fd
    disarm()
    signal.signal(signal.SIGINT, _on_sigint)


def begin() -> None:
    """A request has been read: an interrupt from now on is this run's."""
    global _state
    _state = _BEGUN


def arm() -> None:
    """Just before the user's code: SIGINT raises KeyboardInterrupt there (at once if one
    came while the request was set up)."""
    global _state, _pending
    interrupted, _state, _pending = _pending, _IDLE, False
    signal.signal(signal.SIGINT, _on_sigint)  # the code of an earlier run may have replaced it
    # A signal the code of an earlier run left blocked, and pending, is spent here, ignored.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if interrupted:
        raise KeyboardInterrupt
    _state = _ARMED


def disarm() -> None:
    global _state, _pending
    _state, _pending = _IDLE, False

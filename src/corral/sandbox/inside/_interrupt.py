"""A session interpreter's interrupts: SIGINT is a KeyboardInterrupt in the user's code only.

The engine interrupts a run past its deadline (or whose caller left), and only once the run
has said it started, then waits a short grace for the interpreter's report and keeps the
interpreter with its variables. The signal may land anywhere. In the user's code (armed) it
raises, once. While a request is set up (begun, not yet armed) it is this run's: it is kept
and raised as the code starts. Anywhere else (the runner's report, an idle interpreter, one
that is reading its next request) it is ignored: the runner's own work is never broken off,
and the signal of an interrupt that came too late for its run (a loaded machine may deliver
it after the next request was sent) never reaches the next one. The code may replace the
handler or block the signal; each run installs and unblocks it again, and a run that does not
come back within the grace is ended by a restart instead.
"""

from __future__ import annotations

import signal
import types

__all__ = ["arm", "begin", "disarm", "install"]

_IDLE, _BEGUN, _ARMED = 0, 1, 2
_state = _IDLE
_pending = False


def _on_sigint(signum: int, frame: types.FrameType | None) -> None:
    global _state, _pending
    if _state == _ARMED:
        _state = _IDLE  # one KeyboardInterrupt per run, never one in the runner's cleanup
        raise KeyboardInterrupt
    if _state == _BEGUN:
        _pending = True


def install() -> None:
    """Ignore SIGINT until a request begins."""
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

"""A session interpreter's interrupts: SIGINT is a KeyboardInterrupt in the user's code only.

The engine interrupts a run past its deadline (or whose caller left) and waits a short grace
for the interpreter's report, then keeps the interpreter with its variables. The signal may
land anywhere: in the code (armed: it raises, once), or in the runner before or after it (a
run that had just ended, an idle interpreter): then it is ignored, so the runner's own work
is never broken off and a late signal never interrupts the next run. The code may replace
the handler or block the signal; each run installs and unblocks it again, and a run that
does not come back within the grace is ended by a restart instead.
"""

from __future__ import annotations

import signal
import types

__all__ = ["arm", "disarm", "install"]

_armed = False


def _on_sigint(signum: int, frame: types.FrameType | None) -> None:
    global _armed
    if _armed:
        _armed = False  # one KeyboardInterrupt per run, never one in the runner's cleanup
        raise KeyboardInterrupt


def install() -> None:
    """Ignore SIGINT until a run arms it."""
    disarm()
    signal.signal(signal.SIGINT, _on_sigint)


def arm() -> None:
    """Just before the user's code: SIGINT raises KeyboardInterrupt there."""
    global _armed
    install()  # the code of an earlier run may have replaced the handler
    # A signal the code left blocked and pending is handled here, while still disarmed.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _armed = True


def disarm() -> None:
    global _armed
    _armed = False

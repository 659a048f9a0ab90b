"""The end of every forked child inside the sandbox: it runs its body, then exits there.

A child of the zygote, a holder or a case server must never return into its parent's code
(its loop, its sockets): whatever happens, it leaves by ``os._exit``, saying on stderr why
it failed if it did.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import NoReturn

__all__ = ["run_then_exit"]

_FAILED = 70  # EX_SOFTWARE: the child's own set-up failed


def run_then_exit(what: str, body: Callable[[], object]) -> NoReturn:
    """Run ``body`` in a forked child, say on stderr why it failed if it did, and exit.

    Never returns: a child must not fall back into its parent's code.
    """
    status = 0
    try:
        body()
    except BaseException as exc:  # noqa: BLE001 - any failure ends the child, with a reason
        status = _FAILED
        with contextlib.suppress(OSError):
            os.write(2, f"corral {what} failed: {type(exc).__name__}: {exc}\n".encode())
    finally:
        os._exit(status)

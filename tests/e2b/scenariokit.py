"""What every scenario script shares (it runs in an SDK's venv, so imports nothing of corral):
the ``scenario`` decorator, which records what each one returned or raised, and ``finish``.

A script puts the checkout on its ``sys.path`` and imports ``tests.e2b.scenariokit``.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["RESULTS", "finish", "recorded", "scenario"]

RESULTS: dict[str, Any] = {}
_SCENARIOS: list[Callable[[], None]] = []


def recorded(fn: Callable[[], Any]) -> Callable[[], None]:
    """``fn`` as a scenario: what it returned, or what it raised, lands in ``RESULTS``."""

    def run() -> None:
        try:
            RESULTS[fn.__name__] = {"ok": fn()}
        except Exception as exc:  # noqa: BLE001 - the test judges what was raised
            RESULTS[fn.__name__] = {
                "raised": type(exc).__name__,
                "message": str(exc)[:500],
                "traceback": traceback.format_exc()[-2000:],
            }

    run.__name__ = fn.__name__
    return run


def scenario(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Register ``fn`` to run at ``finish``."""
    _SCENARIOS.append(recorded(fn))
    return fn


def finish() -> None:
    """Run every scenario named in ``E2B_SCENARIOS_ONLY`` (unset: all) and not in
    ``E2B_SCENARIOS_SKIP``, print what they saw as one JSON line, and end the process."""
    skip = set(os.environ.get("E2B_SCENARIOS_SKIP", "").split(","))
    only = set(filter(None, os.environ.get("E2B_SCENARIOS_ONLY", "").split(",")))
    for run in _SCENARIOS:
        if run.__name__ not in skip and (not only or run.__name__ in only):
            run()
    print(json.dumps(RESULTS, default=str), flush=True)
    # What is judged is printed. The SDK's process once aborted in its own interpreter
    # shutdown (CI, after every scenario had passed, with nothing on stderr): that is not the
    # server's to answer for, so the client ends here without running its finalizers.
    os._exit(0)

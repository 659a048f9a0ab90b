"""corral: a self-hosted code interpreter for LLM agents.

Fresh, OS-isolated Python runs in milliseconds, stateful sessions, and the agent tools around
them. Names are loaded on first use so that ``import corral.numeric`` inside a sandbox stays
cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "DEFAULT_LIMITS": "corral._limits",
    "Engine": "corral._api",
    "ExecutionResult": "corral.engine",
    "Input": "corral.engine",
    "Limits": "corral._limits",
    "OutputEvent": "corral.engine",
    "OutputListener": "corral.engine",
    "RunEvent": "corral.engine",
    "Session": "corral.engine",
}

__all__ = [
    "DEFAULT_LIMITS",
    "Engine",
    "ExecutionResult",
    "Input",
    "Limits",
    "OutputEvent",
    "OutputListener",
    "RunEvent",
    "Session",
    "__version__",
]

if TYPE_CHECKING:
    from corral._api import Engine
    from corral._limits import DEFAULT_LIMITS, Limits
    from corral.engine import (
        ExecutionResult,
        Input,
        OutputEvent,
        OutputListener,
        RunEvent,
        Session,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'corral' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    if isinstance(value, type) and value.__module__.startswith("corral._"):
        value.__module__ = __name__  # tracebacks read corral.Limits
    globals()[name] = value
    return value

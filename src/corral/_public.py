"""Public names report the public path they are imported from, not a private module."""

from __future__ import annotations

import types
from collections.abc import MutableMapping
from typing import Any

__all__ = ["publish"]


def publish(namespace: MutableMapping[str, Any]) -> None:
    """Rename the module of every class and function a package's ``__all__`` exports.

    Call at the end of a package's ``__init__`` with ``globals()``: tracebacks and reprs then
    read ``corral.engine.Engine`` rather than ``corral.engine._engine.Engine``. Classes and
    functions the package re-exports from another public package keep that package's name.
    """
    package = namespace["__name__"]
    for name in namespace["__all__"]:
        value = namespace[name]
        if isinstance(value, type | types.FunctionType) and _private_to(value.__module__, package):
            value.__module__ = package


def _private_to(module: str, package: str) -> bool:
    """True for a private module of ``package``, however deep (``pkg.sub._mod`` too)."""
    if not module.startswith(package + "."):
        return False
    return any(part.startswith("_") for part in module[len(package) + 1 :].split("."))

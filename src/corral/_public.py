"""Public names report the public path they are imported from, not a private module."""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_exports", "publish"]


def publish(namespace: MutableMapping[str, Any]) -> None:
    """Rename the module of every class and function a package's ``__all__`` exports.

    Call at the end of a package's ``__init__`` with ``globals()``: tracebacks and reprs then
    read ``corral.engine.Engine`` rather than ``corral.engine._engine.Engine``. Classes and
    functions the package re-exports from another public package keep that package's name.
    """
    package = namespace["__name__"]
    for name in namespace["__all__"]:
        _rename(namespace[name], package)


def lazy_exports(
    namespace: MutableMapping[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` that import each exported name on first use.

    ``exports`` maps each public name to the module that defines it. A package whose modules
    run in different processes (the sandbox's inside and host sides) then costs each process
    only the modules it uses: importing ``corral.sandbox._syscalls`` in the zygote no longer
    imports the server's anyio handles. Names are renamed as :func:`publish` does.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        _rename(value, package)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__


def _rename(value: object, package: str) -> None:
    if isinstance(value, type | types.FunctionType) and _private_to(value.__module__, package):
        value.__module__ = package


def _private_to(module: str, package: str) -> bool:
    """True for a private module of ``package``, however deep (``pkg.sub._mod`` too)."""
    if not module.startswith(package + "."):
        return False
    return any(part.startswith("_") for part in module[len(package) + 1 :].split("."))

"""Inside a case server: a program prepared once, for every case to fork from.

Above: ``_cases.serve_cases``, which forks each case from the state this leaves. Below: the
cell compiler (``_cell``) and the interpreter's own import system. ``prepare``

* compiles the code once (a SyntaxError, or a warning from the parser or the compiler, is
  left for each case to meet, so that each reports it exactly as a fresh worker would);
* imports what the code imports at its top level, when that is a standard-library or
  preloaded module, except the few with side effects one would see (``this``,
  ``antigravity``...) and any that warns as it is imported (it is dropped again, so each
  case sees the warning as it would have);
* runs the code's leading import statements, when each only binds names to what loaded
  modules already hold (``import re``, ``from math import *``) and does so without a
  warning, an error or an import, and compiles the cases' code with those statements as
  ``pass`` (a later ``from __future__`` or string is then still what it is in a fresh run).
  A name those imports bound to what each run sets afresh (``sys.stdin``, ``sys.argv``,
  ``input``: ``SET_BY_EACH_RUN``) is bound again in each case, to the case's own, just
  before its code runs. A case then starts with those names bound, as a fresh run has them
  after its first lines, and does not pay for binding them: a star import touches (and so
  copies) every page that holds one of the module's objects.

Nothing here runs the program's own code: an import runs only a standard-library or
preloaded module, and a leading import only binds what a loaded module already holds.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from corral.sandbox.inside._cell import CELL_FILENAME, Cell, compile_cell

__all__ = ["SET_BY_EACH_RUN", "prepare", "rebind_run_values"]

_STDLIB = frozenset(sys.stdlib_module_names)
_NOT_PREIMPORTED = frozenset(
    {"this", "antigravity", "__hello__", "__phello__", "idlelib", "turtledemo", "turtle"}
    | {"tkinter", "readline", "__main__", "pdb", "site", "ensurepip", "venv", "webbrowser"}
)
"""Modules whose import prints, opens something or reads the terminal: each case imports
them itself."""
_UNSET = object()


@contextlib.contextmanager
def _warnings_caught() -> Iterator[list[warnings.WarningMessage]]:
    """Every warning raised in the block, each one (none shown, none filtered out)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def _parsed(code: str) -> ast.Module | None:
    """``code``'s syntax tree, or None when it does not parse (each case then reports that)."""
    try:
        return ast.parse(code, CELL_FILENAME)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _preimport(tree: ast.Module) -> None:
    names: list[str] = []
    body = list(tree.body)
    while body:
        node = body.pop(0)
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Try | ast.If):
            body.extend(node.body)
    for name in dict.fromkeys(names):
        root = name.partition(".")[0]
        if name in sys.modules or root in _NOT_PREIMPORTED:
            continue
        if root not in _STDLIB and root not in sys.modules:
            continue  # a library the zygote did not preload: its import may do anything
        before = set(sys.modules)
        # A failing import: each case then fails on it as it would.
        with _warnings_caught() as caught, contextlib.suppress(Exception):
            importlib.import_module(name)
        if caught:
            for added in set(sys.modules) - before:
                del sys.modules[added]


_SET_PER_RUN = frozenset(
    {"__builtins__", "__name__", "__doc__", "__file__", "__spec__", "__loader__", "__package__"}
    | {"input_files", "input_assets", "_"}
)
"""Names of the namespace the run itself sets: leading imports that bind one are left to
each case, which binds it after the run has set it, as a fresh run does."""


SET_BY_EACH_RUN: dict[str, frozenset[str]] = {
    "sys": frozenset({"stdin", "argv"}),
    "builtins": frozenset({"input"}),
}
"""What a run sets afresh in a module before its code starts (``_feed``'s stdin, ``input``,
``prepare_script``'s ``argv``). A name the server's run of the leading imports bound to one
of these (``from sys import stdin``) is bound again in each case, to the case's own."""

Rebinding = tuple[types.ModuleType, str, str, object]
"""A module, its attribute, the name the leading imports bound it to, and its value then."""


def _bound_by(node: ast.stmt) -> frozenset[str] | None:
    """The names the statement binds, when it only binds them to what loaded modules hold
    already (so it imports nothing and runs no module code: a name ``from`` would import is a
    submodule); None for any other statement."""
    if isinstance(node, ast.Import):
        if not all(
            alias.name in sys.modules and alias.name.partition(".")[0] not in _NOT_PREIMPORTED
            for alias in node.names
        ):
            return None
        return frozenset(alias.asname or alias.name.partition(".")[0] for alias in node.names)
    if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
        return None
    module = sys.modules.get(node.module)
    if module is None or node.module.partition(".")[0] in _NOT_PREIMPORTED:
        return None
    held = vars(module)
    if [alias.name for alias in node.names] == ["*"]:
        exported = held.get("__all__")
        if exported is None:
            return frozenset(name for name in held if not name.startswith("_"))
        if isinstance(exported, list | tuple) and all(
            isinstance(name, str) and name in held for name in exported
        ):
            return frozenset(exported)
        return None
    if all(alias.name in held for alias in node.names):
        return frozenset(alias.asname or alias.name for alias in node.names)
    return None


def _leading_imports(tree: ast.Module) -> list[int]:
    """The leading statements that only bind names to what loaded modules hold already
    (``_bound_by``), up to the first other one or a ``__future__`` import."""
    run: list[int] = []
    for index, node in enumerate(tree.body):
        if _bound_by(node) is None or _is_future(node):
            break
        run.append(index)
    return run


def _set_by_each_run(statements: list[ast.stmt]) -> list[tuple[str, str, str]]:
    """(module, attribute, bound name) for what ``statements`` bind from ``SET_BY_EACH_RUN``."""
    found: list[tuple[str, str, str]] = []
    for node in statements:
        if not isinstance(node, ast.ImportFrom) or node.module not in SET_BY_EACH_RUN:
            continue
        for alias in node.names:
            attributes = SET_BY_EACH_RUN[node.module]
            if alias.name == "*":
                found.extend((node.module, name, name) for name in sorted(attributes))
            elif alias.name in attributes:
                found.append((node.module, alias.name, alias.asname or alias.name))
    return found


def rebind_run_values(rebindings: tuple[Rebinding, ...], namespace: dict[str, Any]) -> None:
    """In a case, just before its code runs: what the leading imports bound from
    ``SET_BY_EACH_RUN`` becomes what the case's run has set there, as a fresh run binds it.
    A name a later import bound to something else keeps that."""
    for module, attribute, name, value in rebindings:
        now = vars(module).get(attribute, _UNSET)
        if now is not value and namespace.get(name, _UNSET) is value:
            if now is _UNSET:
                del namespace[name]
            else:
                namespace[name] = now


def _is_future(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == "__future__"


Leading = tuple[frozenset[int], tuple[Rebinding, ...]]
"""The indices of the statements a server ran for its cases, and what each case rebinds."""
_NONE_RUN: Leading = (frozenset(), ())


def _run_leading_imports(tree: ast.Module, namespace: dict[str, Any]) -> Leading:
    """Run the code's leading imports of what loaded modules hold, in ``namespace``: the
    statements run (none when running them would differ from a fresh run) and what each case
    must bind again (``rebind_run_values``)."""
    run = _leading_imports(tree)
    if not run:
        return _NONE_RUN
    before = dict(namespace)
    loaded = set(sys.modules)
    statements = [tree.body[index] for index in run]
    leading = compile(ast.Module(body=statements, type_ignores=[]), CELL_FILENAME, "exec")
    with _warnings_caught() as caught:
        try:
            exec(leading, namespace)  # noqa: S102 - imports of loaded modules, checked above
            failed = False
        except Exception:  # noqa: BLE001 - each case then fails on it as it would
            failed = True
    changed = {name for name, value in namespace.items() if before.get(name, _UNSET) is not value}
    imported = set(sys.modules) - loaded
    if failed or caught or imported or changed & _SET_PER_RUN:
        namespace.clear()
        namespace.update(before)
        for name in imported:
            del sys.modules[name]
        return _NONE_RUN
    rebindings = tuple(
        (sys.modules[module], attribute, name, vars(sys.modules[module]).get(attribute, _UNSET))
        for module, attribute, name in _set_by_each_run(statements)
    )
    return frozenset(run), rebindings


def prepare(code: str, namespace: dict[str, Any]) -> tuple[Cell | None, Callable[[], None] | None]:
    """Prepare ``code`` in ``namespace`` for its cases: the compiled cell (None when each case
    must compile the code itself, to report an error or a warning as a fresh run does) and
    what to call in each case just before the code runs."""
    # Where a fresh run has them (before the code's own names: globals() keeps that order).
    namespace.setdefault("input_files", {})
    namespace.setdefault("input_assets", {})
    with _warnings_caught() as caught:
        tree = _parsed(code)
    if tree is None or caught:  # a parser's warning: each case must show it too
        return None, None
    _preimport(tree)
    skip, rebindings = _run_leading_imports(tree, namespace)
    prelude = functools.partial(rebind_run_values, rebindings, namespace) if rebindings else None
    cell: Cell | None = None
    compile_errors = (SyntaxError, ValueError, RecursionError, MemoryError)
    with _warnings_caught() as caught, contextlib.suppress(*compile_errors):
        cell = compile_cell(tree, code, skip=skip)
    # A SyntaxWarning, say: each case compiles the code itself and shows it, as a fresh run
    # does. So does code that does not compile, and reports the error.
    return (None if caught else cell), prelude

"""``__all__`` is sorted and complete, and the package imports only what sits below it."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

import corral.tools

SRC = pathlib.Path(corral.tools.__file__).parent
ABOVE = ("corral.mistral", "corral.http", "corral.mcp", "corral.cli")


def isort_key(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: CONSTANTS, then Classes, then functions."""
    group = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return group, name


def test_all_is_sorted_and_complete() -> None:
    assert corral.tools.__all__ == sorted(corral.tools.__all__, key=isort_key)
    public = {n for n in vars(corral.tools) if not n.startswith("_") and n != "types"}
    assert public == set(corral.tools.__all__)
    for name in corral.tools.__all__:
        obj = getattr(corral.tools, name)
        if isinstance(obj, type):
            assert obj.__module__ == "corral.tools"


def imported_modules(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(SRC.glob("*.py")), ids=lambda p: p.name)
def test_no_upward_or_private_imports(path: pathlib.Path) -> None:
    for module in imported_modules(path):
        assert not module.startswith(ABOVE), f"{path.name} imports {module} from above"
        parts = module.split(".")
        if parts[0] == "corral" and len(parts) > 2 and parts[1] != "tools":
            assert not parts[2].startswith("_"), f"{path.name} imports private {module}"
    importlib.import_module(
        f"corral.tools.{path.stem}" if path.stem != "__init__" else "corral.tools"
    )

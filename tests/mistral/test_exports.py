"""``__all__`` is sorted and complete, and the package imports only what sits below it."""

from __future__ import annotations

import ast
import pathlib

import pytest

import corral.mistral

SRC = pathlib.Path(corral.mistral.__file__).parent
FORBIDDEN = ("corral.engine", "corral.sandbox", "corral.http", "corral.mcp", "corral.cli")


def isort_key(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: CONSTANTS, then Classes, then functions."""
    group = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return group, name


def test_all_is_sorted_and_complete() -> None:
    assert corral.mistral.__all__ == sorted(corral.mistral.__all__, key=isort_key)
    public = {n for n in vars(corral.mistral) if not n.startswith("_") and n != "types"}
    assert public == set(corral.mistral.__all__)
    for name in corral.mistral.__all__:
        obj = getattr(corral.mistral, name)
        if isinstance(obj, type):
            assert obj.__module__ == "corral.mistral"


@pytest.mark.parametrize("path", sorted(SRC.glob("*.py")), ids=lambda p: p.name)
def test_imports_only_tools_errors_and_httpx_from_corral(path: pathlib.Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module
            assert not module.startswith(FORBIDDEN), f"{path.name} imports {module}"
            parts = module.split(".")
            if parts[0] == "corral" and len(parts) > 2 and parts[1] != "mistral":
                assert not parts[2].startswith("_"), f"{path.name} imports private {module}"
        elif isinstance(node, ast.Import):
            assert "mistralai" not in {a.name.split(".")[0] for a in node.names}

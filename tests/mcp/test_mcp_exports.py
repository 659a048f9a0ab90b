"""``corral.mcp`` exports a sorted, complete ``__all__`` and reaches only public APIs below it."""

from __future__ import annotations

import ast
import pathlib

import pytest

import corral.mcp

SRC = pathlib.Path(corral.mcp.__file__).parent
# Below the MCP front end: the tools, sources and engine public APIs, errors and the config,
# and the helper every package uses to name its exports.
ALLOWED = {
    "corral",
    "corral._config",
    "corral._public",
    "corral.engine",
    "corral.errors",
    "corral.sources",
    "corral.tools",
}


def _isort_key(name: str) -> tuple[int, str]:
    return (0 if name.isupper() else 1 if name[0].isupper() else 2), name


def test_all_is_sorted_and_complete() -> None:
    assert corral.mcp.__all__ == sorted(corral.mcp.__all__, key=_isort_key)
    public = {n for n in vars(corral.mcp) if not n.startswith("_")}
    assert public == set(corral.mcp.__all__)
    assert corral.mcp.build_server.__module__ == "corral.mcp"


@pytest.mark.parametrize("path", sorted(SRC.glob("*.py")), ids=lambda p: p.name)
def test_imports_stay_on_public_apis_below(path: pathlib.Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        for module in modules:
            if module.split(".")[0] == "corral" and not module.startswith("corral.mcp"):
                assert module in ALLOWED, f"{path.name} imports {module}"

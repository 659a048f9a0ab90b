"""corral.http's public names and its place in the layers (style.md sections 1-2)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import corral.http


def test_public_api_is_sorted_and_complete() -> None:
    assert corral.http.__all__ == sorted(corral.http.__all__)
    assert corral.http.__all__ == ["create_app", "engine_options", "serve", "serve_async"]
    for name in corral.http.__all__:
        assert getattr(corral.http, name).__module__.startswith("corral.http")


def test_modules_are_private_and_export_what_they_define() -> None:
    # Order within __all__ is ruff's (RUF022); here: every listed name exists.
    for info in pkgutil.iter_modules(corral.http.__path__):
        assert info.name.startswith("_")
        module = importlib.import_module(f"corral.http.{info.name}")
        assert all(hasattr(module, n) for n in module.__all__), info.name


def test_never_imports_below_the_engine() -> None:
    """Front ends reach the engine's public API only: never corral.sandbox or engine privates."""
    folder = Path(corral.http.__file__).parent
    for path in [*folder.glob("*.py"), folder.parent / "_config.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                assert not module.startswith("corral.sandbox"), (path.name, module)
                assert not module.startswith("corral.engine._"), (path.name, module)

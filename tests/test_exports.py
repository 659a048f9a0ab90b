"""Every package's public names: complete ``__all__`` lists, reached by their public path."""

from __future__ import annotations

import importlib
import types

import pytest

import corral
import corral.engine

PACKAGES = [
    "corral.engine",
    "corral.sandbox",
    "corral.e2b",
    "corral.http",
    "corral.cli",
    "corral.batch",
    "corral.client",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_exports_are_complete_and_named_by_their_public_path(name: str) -> None:
    package = importlib.import_module(name)
    values = {attr: getattr(package, attr) for attr in package.__all__}  # loads lazy names
    public = {
        attr for attr, value in vars(package).items()
        if not attr.startswith("_") and not isinstance(value, types.ModuleType)
    }  # fmt: skip
    assert set(package.__all__) == public
    assert set(dir(package)) >= public
    for attr, value in values.items():
        if isinstance(value, type | types.FunctionType):
            assert value.__module__ == name, attr


def test_the_top_level_api() -> None:
    assert set(corral.__all__) == {
        "DEFAULT_LIMITS", "Engine", "ExecutionResult", "Input", "Limits", "OutputEvent",
        "OutputListener", "RunEvent", "Session", "__version__",
    }  # fmt: skip
    for attr in corral.__all__:
        assert getattr(corral, attr) is not None
    assert corral.Limits.__module__ == "corral"
    assert corral.Engine.__module__ == "corral"  # the engine with sources ingestion wired in
    assert issubclass(corral.Engine, corral.engine.Engine)
    assert corral.Session is corral.engine.Session
    with pytest.raises(AttributeError):
        _ = corral.NoSuchThing

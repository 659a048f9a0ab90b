"""corral._public.publish: exported names take their package's public path."""

from __future__ import annotations

import sys
import types

import pytest

from corral._public import lazy_exports, publish


def test_publish_renames_private_definitions_only() -> None:
    class Private:
        pass

    class Elsewhere:
        pass

    def helper() -> None:
        pass

    Private.__module__ = "pkg._impl"
    helper.__module__ = "pkg._impl"
    Elsewhere.__module__ = "other.public"
    constant = 3
    namespace = {
        "__name__": "pkg",
        "__all__": ["Elsewhere", "Private", "constant", "helper"],
        "Private": Private, "Elsewhere": Elsewhere, "helper": helper, "constant": constant,
    }  # fmt: skip
    publish(namespace)
    assert Private.__module__ == "pkg"
    assert helper.__module__ == "pkg"
    assert Elsewhere.__module__ == "other.public"  # re-exported from another public package
    assert isinstance(helper, types.FunctionType)


def test_lazy_exports_load_each_name_on_first_use_under_its_public_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    package, private = types.ModuleType("pkg"), types.ModuleType("pkg._impl")

    class Private:
        pass

    Private.__module__ = "pkg._impl"
    private.Private = Private  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pkg", package)
    monkeypatch.setitem(sys.modules, "pkg._impl", private)
    namespace = vars(package)
    getattr_, dir_ = lazy_exports(namespace, {"Private": "pkg._impl"})
    assert "Private" in dir_()
    assert "Private" not in namespace
    assert getattr_("Private") is Private
    assert Private.__module__ == "pkg"
    assert namespace["Private"] is Private  # cached: the next access is a plain lookup
    with pytest.raises(AttributeError, match="no attribute 'Missing'"):
        getattr_("Missing")

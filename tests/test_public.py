"""corral._public.publish: exported names take their package's public path."""

from __future__ import annotations

import types

from corral._public import publish


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

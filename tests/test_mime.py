"""The MIME table both sides of the sandbox read: what it says of a type, and that code inside
the sandbox may import it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from corral import _mime
from corral._mime import (
    BASE64_IMAGE_TYPES,
    IMAGE_SUFFIXES,
    IMAGE_SVG,
    MIME_SHORT_NAMES,
    OCTET_STREAM,
    guess_media_type,
    is_textual,
)


def test_the_table_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(_mime.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported - {"__future__"} <= sys.stdlib_module_names


@pytest.mark.parametrize(
    ("mime", "textual"),
    [("text/plain", True), ("text/csv", True), (IMAGE_SVG, True), ("image/png", False),
     ("application/json", False), ("application/pdf", False)],
)  # fmt: skip
def test_textual_types_are_text_and_svg(mime: str, textual: bool) -> None:
    assert is_textual(mime) is textual


def test_every_image_has_a_suffix_and_base64_images_come_first() -> None:
    assert set(BASE64_IMAGE_TYPES) < set(IMAGE_SUFFIXES)
    assert tuple(IMAGE_SUFFIXES)[: len(BASE64_IMAGE_TYPES)] == BASE64_IMAGE_TYPES
    assert not any(is_textual(mime) for mime in BASE64_IMAGE_TYPES)
    assert all(mime in MIME_SHORT_NAMES for mime in IMAGE_SUFFIXES)


def test_the_tables_cannot_be_changed_by_a_caller() -> None:
    with pytest.raises(TypeError):
        IMAGE_SUFFIXES["image/gif"] = ".gif"  # type: ignore[index]
    with pytest.raises(TypeError):
        MIME_SHORT_NAMES["image/gif"] = "gif"  # type: ignore[index]


def test_a_media_type_is_guessed_from_the_name_and_defaults_to_octets() -> None:
    assert guess_media_type("report.csv") == "text/csv"
    assert guess_media_type("data/archive.no-such-type") == OCTET_STREAM
    assert guess_media_type("no-extension") == OCTET_STREAM
    # A common type no registry lists: known unless asked for registered types only.
    assert guess_media_type("old.pict") == "image/pict"
    assert guess_media_type("old.pict", strict=True) == OCTET_STREAM

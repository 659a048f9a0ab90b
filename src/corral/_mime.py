"""The MIME types of results, displays and files: one table for the runner inside the sandbox,
which makes the bundles, and for every surface that renders them (tools, CLI, E2B, HTTP).

Standard library only: code inside the sandbox imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "APPLICATION_JAVASCRIPT",
    "APPLICATION_JSON",
    "APPLICATION_PDF",
    "BASE64_IMAGE_TYPES",
    "E2B_CHART",
    "IMAGE_JPEG",
    "IMAGE_PNG",
    "IMAGE_SUFFIXES",
    "IMAGE_SVG",
    "MIME_SHORT_NAMES",
    "OCTET_STREAM",
    "TEXT_HTML",
    "TEXT_LATEX",
    "TEXT_MARKDOWN",
    "TEXT_PLAIN",
    "guess_media_type",
    "is_textual",
]

TEXT_PLAIN = "text/plain"
"""Every bundle's fallback; the one type a result always has."""
TEXT_HTML = "text/html"
TEXT_MARKDOWN = "text/markdown"
TEXT_LATEX = "text/latex"
IMAGE_PNG = "image/png"
IMAGE_JPEG = "image/jpeg"
IMAGE_SVG = "image/svg+xml"
APPLICATION_PDF = "application/pdf"
APPLICATION_JSON = "application/json"
APPLICATION_JAVASCRIPT = "application/javascript"
E2B_CHART = "e2b/chart"
"""E2B's chart data of a matplotlib figure (``sandbox.inside._charts``)."""
OCTET_STREAM = "application/octet-stream"
"""A file's media type when its name says nothing."""

MIME_SHORT_NAMES: Mapping[str, str] = MappingProxyType(
    {
        TEXT_PLAIN: "text",
        TEXT_HTML: "html",
        TEXT_MARKDOWN: "markdown",
        IMAGE_SVG: "svg",
        IMAGE_PNG: "png",
        IMAGE_JPEG: "jpeg",
        APPLICATION_PDF: "pdf",
        TEXT_LATEX: "latex",
        APPLICATION_JSON: "json",
        APPLICATION_JAVASCRIPT: "javascript",
    }
)
"""Jupyter's short name of each type a bundle commonly carries (E2B's result events carry each
under its short name; the rest go in ``extra``)."""

BASE64_IMAGE_TYPES = (IMAGE_PNG, IMAGE_JPEG)
"""Images a bundle carries as base64 of their bytes, which a model can be shown as they are,
the preferred first."""

IMAGE_SUFFIXES: Mapping[str, str] = MappingProxyType(
    {IMAGE_PNG: ".png", IMAGE_JPEG: ".jpg", IMAGE_SVG: ".svg"}
)
"""Every image type a bundle may carry, the preferred first, with a saved file's suffix."""


def is_textual(mime: str) -> bool:
    """Whether a bundle's value of type ``mime`` is text, bounded in characters (every
    ``text/*`` type, and SVG, which is XML), rather than base64 bytes or a JSON value."""
    return mime.startswith("text/") or mime == IMAGE_SVG


def guess_media_type(name: str, *, strict: bool = False) -> str:
    """A file's media type from its name's extension, ``OCTET_STREAM`` when none is known.

    Args:
        name: the file name or path.
        strict: only the types IANA registers, not also the common unregistered ones
            (``mimetypes.guess_type``'s flag).
    """
    # Imported here: the runner inside the sandbox imports this module and never guesses.
    import mimetypes

    return mimetypes.guess_type(name, strict=strict)[0] or OCTET_STREAM

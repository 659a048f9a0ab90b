"""Attachments (CSV, TSV, XLSX, JSON, text, Markdown) turned into canonical UTF-8 text.

Anything else (parquet, images, PDFs, archives) has no text form: it is kept as its original
bytes with an empty canonical text, so code can still read it. Only a file that claims a
format it does not have (invalid UTF-8 text, a corrupt workbook) is refused, with the reason.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from dataclasses import dataclass, field
from typing import Literal, NoReturn

from corral._mime import APPLICATION_JSON, OCTET_STREAM, TEXT_MARKDOWN, TEXT_PLAIN, guess_media_type
from corral.errors import SourceTooLarge, UnsupportedSource
from corral.sources._limits import DEFAULT_SOURCE_LIMITS, SourceLimits
from corral.sources._xlsx import render_workbook

__all__ = ["Ingested", "SourceFormat", "detect_format", "ingest"]

SourceFormat = Literal["csv", "tsv", "xlsx", "json", "text", "markdown", "binary"]

_XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
_MEDIA_TYPES: dict[str, SourceFormat] = {
    "text/csv": "csv",
    "application/csv": "csv",
    "text/tab-separated-values": "tsv",
    _XLSX: "xlsx",
    APPLICATION_JSON: "json",
    "text/json": "json",
    TEXT_PLAIN: "text",
    TEXT_MARKDOWN: "markdown",
    "text/x-markdown": "markdown",
}
_EXTENSIONS: dict[str, SourceFormat] = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".xlsx": "xlsx",
    ".json": "json",
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
}
_CANONICAL: dict[SourceFormat, str] = {
    "csv": "text/csv",
    "tsv": "text/tab-separated-values",
    "xlsx": _XLSX,
    "json": APPLICATION_JSON,
    "text": TEXT_PLAIN,
    "markdown": TEXT_MARKDOWN,
}
# Labels that say nothing about the content, so the extension decides. Browsers on Windows
# send application/vnd.ms-excel for every .csv file.
_GENERIC = frozenset({"", OCTET_STREAM, "binary/octet-stream", "application/vnd.ms-excel"})
# Longest match first: the UTF-32 LE mark starts with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ingested:
    """An attachment's canonical representation.

    Attributes:
        text: canonical UTF-8 text with ``\\n`` line ends.
        media_type: the detected media type of the original bytes.
        format: the detected format.
    """

    text: bytes = field(repr=False)
    media_type: str
    format: SourceFormat


def _declared(media_type: str | None) -> str:
    return (media_type or "").split(";", 1)[0].strip().lower()


def _base_name(filename: str) -> str:
    return filename.replace("\\", "/").rsplit("/", 1)[-1]


def detect_format(filename: str, media_type: str | None) -> SourceFormat:
    """Decide an attachment's format: by media type first, then by file extension.

    A generic media type (none, ``application/octet-stream``, ``application/vnd.ms-excel``)
    defers to the extension; any other ``text/*`` type is plain text. What names no text
    format (``image/png``, ``.parquet``, ``.xls``, no extension at all) is ``binary``.
    """
    declared = _declared(media_type)
    if declared not in _GENERIC:
        found = _MEDIA_TYPES.get(declared)
        if found is None and declared.endswith("+json"):
            found = "json"
        if found is None and declared.startswith("text/"):
            found = "text"
        return found or "binary"
    name = _base_name(filename).lower()
    suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
    return _EXTENSIONS.get(suffix, "binary")


def _binary_media_type(filename: str, media_type: str | None) -> str:
    declared = _declared(media_type)
    if declared and declared not in _GENERIC:
        return declared
    return guess_media_type(_base_name(filename))


def ingest(
    data: bytes,
    filename: str,
    media_type: str | None = None,
    *,
    limits: SourceLimits = DEFAULT_SOURCE_LIMITS,
) -> Ingested:
    """Turn an attachment into canonical UTF-8 text.

    CSV and TSV become CSV (quoting normalised, ``\\n`` line ends); XLSX becomes one CSV
    block per sheet (see :func:`corral.sources._xlsx.render_workbook`); JSON is validated and
    kept as written; text and Markdown are kept as written. Text input must be UTF-8 (a
    UTF-8 byte-order mark is dropped; UTF-16 and UTF-32 are accepted only with their mark):
    no encoding is guessed, because a wrong guess silently changes the data. Line ends
    become ``\\n``.

    Args:
        data: the attachment's bytes.
        filename: its file name; the extension decides when the media type does not.
        media_type: its declared media type, if any.
        limits: size bounds.

    Returns:
        The canonical text, the detected media type and format.

    Raises:
        UnsupportedSource: the bytes are not what their name or media type says (invalid
            UTF-8 text, a corrupt workbook, malformed CSV or JSON); the message says why.
        SourceTooLarge: the attachment or its text exceeds a bound.
    """
    if len(data) > limits.attachment_bytes:
        raise SourceTooLarge(
            f"the attachment has {len(data)} bytes, over the bound of {limits.attachment_bytes}"
        )
    kind = detect_format(filename, media_type)
    if kind == "binary" and _declared(media_type) in _GENERIC and _is_plain_text(data):
        kind = "text"  # a .log, .py or extensionless note: nothing says binary, and it reads
    if kind == "binary":
        # No text form: the code reads the original bytes (input_assets[id]["original"]).
        return Ingested(text=b"", media_type=_binary_media_type(filename, media_type), format=kind)
    if kind == "xlsx":
        text = render_workbook(
            data, text_bytes=limits.text_bytes, unpacked_bytes=limits.unpacked_bytes
        )
    else:
        decoded = _decode(data, kind)
        if kind in ("csv", "tsv"):
            text = _normalise_csv(decoded, kind)
        else:
            text = decoded.replace("\r\n", "\n").replace("\r", "\n")
            if kind == "json":
                _validate_json(text)
    encoded = text.encode("utf-8")
    if len(encoded) > limits.text_bytes:
        raise SourceTooLarge(
            f"the attachment's text has {len(encoded)} bytes, over the bound of {limits.text_bytes}"
        )
    return Ingested(text=encoded, media_type=_CANONICAL[kind], format=kind)


def _is_plain_text(data: bytes) -> bool:
    if not data or b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _decode(data: bytes, kind: SourceFormat) -> str:
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), "utf-8")
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise UnsupportedSource(
            f"the {kind} attachment is not valid {encoding.upper()} (byte {exc.start}); "
            "save it as UTF-8 and attach it again"
        ) from exc
    # The UTF-16/32 codecs consume their mark; utf-8-sig too; only plain UTF-8 keeps it.
    if "\x00" in text:
        raise UnsupportedSource(f"the {kind} attachment contains NUL characters; is it binary?")
    return text


def _normalise_csv(text: str, kind: SourceFormat) -> str:
    if kind == "tsv":
        # TSV has no quoting: a quote character is data.
        reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    try:
        for row in reader:
            writer.writerow([cell.replace("\r\n", "\n").replace("\r", "\n") for cell in row])
    except csv.Error as exc:
        raise UnsupportedSource(
            f"malformed {kind.upper()} at line {reader.line_num}: {exc}"
        ) from exc
    return out.getvalue()


def _validate_json(text: str) -> None:
    try:
        json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise UnsupportedSource(
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    except (ValueError, RecursionError) as exc:
        raise UnsupportedSource(f"invalid JSON: {exc}") from exc


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON value")

"""XLSX workbooks rendered as canonical CSV text, one block per sheet."""

from __future__ import annotations

import csv
import datetime
import io
import warnings
import zipfile
from collections.abc import Iterable, Sequence

import openpyxl
from openpyxl.styles.numbers import is_datetime

from corral.errors import SourceError, SourceTooLarge, UnsupportedSource

__all__ = ["render_workbook"]

# Excel's own row limit; a row index past it can only come from a crafted file, and openpyxl
# would otherwise yield every empty row up to it one by one.
_EXCEL_MAX_ROWS = 1_048_576
# Integral floats below 2**53 are exact, so "9.0" can be written "9" without losing anything.
_EXACT_INT = 2**53


def render_workbook(data: bytes, *, text_bytes: int, unpacked_bytes: int) -> str:
    """Render every worksheet of an XLSX workbook as CSV text.

    Each sheet opens with a line ``# sheet: <name>``; sheets are separated by a blank line.
    Rows are CSV with ``\\n`` line ends, padded to the sheet's used width. Cells hold cached
    values, never formulas (a formula never calculated by a spreadsheet app has none and is
    empty); empty cells are empty; dates, times and datetimes are ISO 8601; integral numbers
    have no ``.0``; booleans are ``TRUE``/``FALSE``. Trailing empty rows and columns are
    dropped; leading ones are kept so positions match the spreadsheet.

    Args:
        data: the workbook's bytes.
        text_bytes: bound on the UTF-8 size of the rendering.
        unpacked_bytes: bound on the declared uncompressed size of the archive's parts.

    Returns:
        The rendering.

    Raises:
        UnsupportedSource: the bytes are not a readable XLSX workbook.
        SourceTooLarge: the archive or its rendering exceeds a bound.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            declared = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise UnsupportedSource(
            "not a readable XLSX workbook (not a ZIP archive; password-protected and legacy "
            ".xls workbooks are not supported)"
        ) from exc
    # zipfile stops each part at its declared size, so this bounds what openpyxl can inflate.
    if declared > unpacked_bytes:
        raise SourceTooLarge(
            f"the XLSX workbook unpacks to {declared} bytes, over the bound of {unpacked_bytes}"
        )
    try:
        # openpyxl warns about features it ignores (data validation, styles); they do not
        # change cell values, and under warnings-as-errors they would reject a good file.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _render(data, text_bytes)
    except SourceError:
        raise
    except Exception as exc:
        # Parsing untrusted XML inside a ZIP fails in many ways (KeyError, ParseError,
        # TypeError...); any of them means the same thing to the caller: a corrupt workbook.
        detail = f"{type(exc).__name__}: {exc}"[:200]
        raise UnsupportedSource(f"the XLSX workbook could not be read ({detail})") from exc


def _render(data: bytes, text_bytes: int) -> str:
    workbook = openpyxl.load_workbook(
        io.BytesIO(data), read_only=True, data_only=True, keep_links=False
    )
    out = io.StringIO()
    spent = 0
    try:
        for index, sheet in enumerate(workbook.worksheets):
            title = " ".join(sheet.title.splitlines())
            header = ("\n" if index else "") + f"# sheet: {title}\n"
            out.write(header)
            # Rows present in the XML only: a claimed dimension like A1:XFD1048576 would
            # otherwise make openpyxl pad every row to it before we could count anything.
            sheet.reset_dimensions()
            rows = sheet.iter_rows(max_row=_EXCEL_MAX_ROWS)
            spent = _render_sheet(rows, out, spent + len(header), text_bytes)
    finally:
        workbook.close()
    return out.getvalue()


def _render_sheet(
    source: Iterable[Sequence[object]], out: io.StringIO, spent: int, bound: int
) -> int:
    rows: list[list[str]] = []
    width = 0
    # `spent` is a lower bound on the rendered characters (hence bytes), so a crafted sheet
    # is stopped while it is read, not after it has been buffered.
    for cells in source:
        values = [_cell_text(cell) for cell in cells]
        while values and not values[-1]:
            values.pop()
        rows.append(values)
        width = max(width, len(values))
        spent += sum(len(value) for value in values) + max(len(values) - 1, 0) + 1
        if spent > bound:
            raise SourceTooLarge(f"the workbook's text exceeds the bound of {bound} bytes")
    while rows and not rows[-1]:
        rows.pop()
    # Every row is padded to the widest one: at least width - 1 commas and a newline each.
    if len(rows) * width > bound:
        raise SourceTooLarge(f"the workbook's text exceeds the bound of {bound} bytes")
    writer = csv.writer(out, lineterminator="\n")
    for values in rows:
        if any(values):
            writer.writerow(values + [""] * (width - len(values)))
        else:
            # csv writes a lone empty field as '""'; a run of commas keeps the row plain.
            out.write("," * (width - 1) + "\n")
    return spent


def _cell_text(cell: object) -> str:
    value = getattr(cell, "value", None)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < _EXACT_INT:
            return str(int(value))
        return repr(value)
    if isinstance(value, datetime.datetime):
        # openpyxl returns datetimes even for date-only formats; keep the time only when
        # the format shows it or it is not midnight, so nothing is lost either way.
        number_format = getattr(cell, "number_format", None)
        kind = is_datetime(number_format) if isinstance(number_format, str) else None
        if kind == "date" and value.time() == datetime.time():
            return value.date().isoformat()
        return value.isoformat()
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return _iso_duration(value)
    return str(value).replace("\r\n", "\n").replace("\r", "\n")


def _iso_duration(delta: datetime.timedelta) -> str:
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{hours}H" if hours else "", f"{minutes}M" if minutes else ""]
    if seconds or fraction or not any(parts):
        text = f"{seconds}.{fraction:06d}".rstrip("0") if fraction else str(seconds)
        parts.append(f"{text}S")
    return f"{sign}PT{''.join(parts)}"

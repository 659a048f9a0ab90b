import datetime
import io
import time
import zipfile

import openpyxl
import pytest
from openpyxl.workbook.workbook import Workbook

from corral.errors import SourceTooLarge
from corral.sources._xlsx import _iso_duration, render_workbook

_MIB = 1024 * 1024


def _save(workbook: Workbook) -> bytes:
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def _patch(data: bytes, member: str, old: str, new: str) -> bytes:
    """Rewrite one part of an archive, as a spreadsheet app would have written it."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            body = source.read(info)
            if info.filename == member:
                text = body.decode()
                assert old in text
                body = text.replace(old, new).encode()
            target.writestr(info, body)
    return out.getvalue()


def _render(data: bytes, text_bytes: int = 10 * _MIB) -> str:
    return render_workbook(data, text_bytes=text_bytes, unpacked_bytes=200 * _MIB)


def test_every_sheet_is_rendered_in_order_under_a_header() -> None:
    workbook = openpyxl.Workbook()
    first = workbook.active
    assert first is not None
    first.title = "Runtime"
    first.append(["Prototype", "Hours"])
    first.append(["Prototype A", 9])
    second = workbook.create_sheet("Notes, v2")
    second.append(["synthetic"])
    workbook.create_sheet("Empty")
    assert _render(_save(workbook)) == (
        "# sheet: Runtime\nPrototype,Hours\nPrototype A,9\n"
        "\n# sheet: Notes, v2\nsynthetic\n"
        "\n# sheet: Empty\n"
    )


def test_formula_cells_give_cached_values_never_formulas() -> None:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append([9, "=A1*2", "=A1*3", "end"])
    # openpyxl cannot calculate, so it writes no cached values; a spreadsheet app would.
    data = _patch(
        _save(workbook), "xl/worksheets/sheet1.xml", "<f>A1*2</f><v />", "<f>A1*2</f><v>18</v>"
    )
    text = _render(data)
    assert text == "# sheet: Sheet\n9,18,,end\n"
    assert "A1" not in text


def test_empty_cells_stay_empty_and_positions_are_kept() -> None:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet["B2"] = "x"
    sheet["D2"] = 1
    sheet["C4"] = "y"
    sheet["F9"].number_format = "0.00"  # styled but empty: must not widen or lengthen
    assert _render(_save(workbook)) == "# sheet: Sheet\n,,,\n,x,,1\n,,,\n,,y,\n"


def test_dates_times_and_durations_are_iso_8601() -> None:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(
        [
            datetime.date(2024, 3, 1),
            datetime.datetime(2024, 3, 1, 12, 30),
            datetime.datetime(2024, 3, 1),
            datetime.time(7, 5),
            datetime.timedelta(hours=36, minutes=30),
        ]
    )
    assert _render(_save(workbook)).splitlines()[1] == (
        "2024-03-01,2024-03-01T12:30:00,2024-03-01T00:00:00,07:05:00,PT36H30M"
    )


def test_numbers_booleans_and_text() -> None:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append([7.0, 7.5, 1e-05, 123456789012, 1e15, 1e20, -0.0, True, False])
    sheet.append(['say "hi"', "a,b", "two\r\nlines", "#N/A"])
    rows = _render(_save(workbook)).split("\n", 1)[1]
    assert rows == (
        "7,7.5,1e-05,123456789012,1000000000000000,1e+20,0,TRUE,FALSE\n"
        '"say ""hi""","a,b","two\nlines",#N/A,,,,,\n'
    )


def test_a_claimed_huge_dimension_is_ignored() -> None:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(["a", 1])
    data = _patch(
        _save(workbook),
        "xl/worksheets/sheet1.xml",
        '<dimension ref="A1:B1" />',
        '<dimension ref="A1:XFD1048576" />',
    )
    started = time.monotonic()
    assert _render(data) == "# sheet: Sheet\na,1\n"
    assert time.monotonic() - started < 5


def test_padding_to_a_far_column_is_bounded_while_reading() -> None:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet["XFD1"] = "far"
    for row in range(2, 2000):
        sheet.cell(row=row, column=1, value=row)
    with pytest.raises(SourceTooLarge, match="bound of 100000"):
        _render(_save(workbook), text_bytes=100_000)


def test_many_rows_are_bounded_while_reading() -> None:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    for row in range(1, 5000):
        sheet.cell(row=row, column=1, value="0123456789")
    with pytest.raises(SourceTooLarge, match="bound of 1000"):
        _render(_save(workbook), text_bytes=1000)


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        (datetime.timedelta(0), "PT0S"),
        (datetime.timedelta(seconds=1.5), "PT1.5S"),
        (datetime.timedelta(hours=2, seconds=3), "PT2H3S"),
        (datetime.timedelta(days=1), "PT24H"),
        (-datetime.timedelta(minutes=90), "-PT1H30M"),
    ],
)
def test_durations(delta: datetime.timedelta, expected: str) -> None:
    assert _iso_duration(delta) == expected

"""Generate examples/northstar.xlsx, the synthetic Northstar workbook.

Its calculation is docs/code-interpreter.md §10.

Two measured runtimes, Prototype A 9 h and Prototype B 7.5 h, whose mean is 8.25 h. The
bytes are reproducible: workbook timestamps and ZIP entry times are fixed, so re-running
this script leaves the committed file unchanged.

Usage: python scripts/make_northstar.py [OUTPUT]   (default: examples/northstar.xlsx)
"""

from __future__ import annotations

import datetime
import io
import sys
import zipfile
from pathlib import Path

import openpyxl
from openpyxl.writer.excel import ExcelWriter

ROWS: list[tuple[str, str | float]] = [
    ("Prototype", "Measured runtime (hours)"),
    ("Prototype A", 9),
    ("Prototype B", 7.5),
]
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "examples" / "northstar.xlsx"
# Any fixed instant works; it only has to be the same on every run.
_EPOCH = datetime.datetime(2024, 1, 1)


def build() -> bytes:
    """Return the workbook's bytes, identical on every call."""
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.title = "Runtime"
    for row in ROWS:
        sheet.append(row)
    sheet.column_dimensions["A"].width = 14
    sheet.column_dimensions["B"].width = 26
    props = workbook.properties
    props.title = "Northstar prototypes (synthetic)"
    props.creator = "corral"
    props.created = props.modified = _EPOCH
    raw = io.BytesIO()
    # ExcelWriter directly: openpyxl's save() stamps the current time into docProps/core.xml.
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive:
        ExcelWriter(workbook, archive).write_data()
    return _fix_entry_times(raw.getvalue())


def _fix_entry_times(data: bytes) -> bytes:
    # zipfile.writestr stamps each entry with the local time of the call.
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=_EPOCH.timetuple()[:6])
            fixed.compress_type = zipfile.ZIP_DEFLATED
            fixed.external_attr = 0o644 << 16
            target.writestr(fixed, source.read(info))
    return out.getvalue()


def main(argv: list[str]) -> int:
    """Write the workbook to ``argv[0]`` (or the default path) and report it."""
    output = Path(argv[0]) if argv else DEFAULT_OUTPUT
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(build())
    print(f"wrote {output} ({output.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

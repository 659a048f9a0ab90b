import codecs
import csv
import io
import runpy
import zipfile
from pathlib import Path

import openpyxl
import pytest

from corral.errors import SourceError, SourceTooLarge, UnsupportedSource
from corral.numeric import mean
from corral.sources import SourceLimits, detect_format, ingest

ROOT = Path(__file__).resolve().parents[2]
NORTHSTAR = ROOT / "examples" / "northstar.xlsx"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def _xlsx(rows: list[list[object]]) -> bytes:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    for row in rows:
        sheet.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("filename", "media_type", "expected"),
    [
        ("a.csv", None, "csv"),
        ("A.CSV", "", "csv"),
        ("a.tsv", None, "tsv"),
        ("a.tab", "application/octet-stream", "tsv"),
        ("dir/b.xlsx", "application/octet-stream", "xlsx"),
        ("C:\\dir\\b.xlsx", None, "xlsx"),
        ("a.csv", "application/vnd.ms-excel", "csv"),
        ("a.json", None, "json"),
        ("notes.md", None, "markdown"),
        ("notes.txt", None, "text"),
        ("a.json", "text/csv", "csv"),
        ("x", "Text/CSV; charset=utf-8", "csv"),
        ("x", "text/tab-separated-values", "tsv"),
        ("x", XLSX, "xlsx"),
        ("x", "application/geo+json", "json"),
        ("x", "text/markdown", "markdown"),
        ("x.py", "text/x-python", "text"),
        ("x.parquet", None, "binary"),
        ("x", "image/png", "binary"),
        ("README", None, "binary"),
    ],
)
def test_detection_prefers_the_media_type_then_the_extension(
    filename: str, media_type: str | None, expected: str
) -> None:
    assert detect_format(filename, media_type) == expected


PARQUET = b"PAR1\x15\x04\x15\x10\x15\x14L\x15\x02\x15\x00\x12\x00\x00\x08\x1c\xffPAR1"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"


@pytest.mark.parametrize(
    ("filename", "media_type", "data", "expected_type"),
    [
        ("scores.parquet", None, PARQUET, "application/octet-stream"),
        ("a.csv", "image/png", PNG, "image/png"),
        ("photo.png", "application/octet-stream", PNG, "image/png"),
        ("report.pdf", None, b"%PDF-1.7\n\xe2\xe3\xcf\xd3\n", "application/pdf"),
        ("blob", None, b"\x00\x01\x02", "application/octet-stream"),
        ("old.xls", "application/vnd.ms-excel", b"\xd0\xcf\x11\xe0", "application/vnd.ms-excel"),
    ],
)
def test_files_without_a_text_form_keep_their_bytes_and_an_empty_text(
    filename: str, media_type: str | None, data: bytes, expected_type: str
) -> None:
    ingested = ingest(data, filename, media_type)
    assert (ingested.format, ingested.text, ingested.media_type) == ("binary", b"", expected_type)


def test_undeclared_files_that_read_as_utf8_are_text() -> None:
    for name in ("README", "job.log", "script.py"):
        assert ingest(b"hello\r\nworld", name).text == b"hello\nworld"


def test_csv_is_normalised_to_utf8_with_newline_line_ends() -> None:
    data = codecs.BOM_UTF8 + b'name,note\r\n"Smith, J","said ""hi""\r\nthen left"\r\n'
    ingested = ingest(data, "people.csv")
    assert ingested.text == b'name,note\n"Smith, J","said ""hi""\nthen left"\n'
    assert (ingested.format, ingested.media_type) == ("csv", "text/csv")


def test_malformed_csv_is_rejected_with_its_line() -> None:
    with pytest.raises(UnsupportedSource, match="malformed CSV at line 2"):
        ingest(b'a,b\n1,"2"x\n', "bad.csv")
    with pytest.raises(UnsupportedSource, match="malformed CSV"):
        ingest(b'a,"unterminated\n', "bad.csv")


def test_tsv_becomes_csv_and_quotes_are_data() -> None:
    data = b'size\tnote\n5"\tcomma, here\n'
    for ingested in (ingest(data, "t.tsv"), ingest(data, "t", "text/tab-separated-values")):
        assert ingested.text == b'size,note\n"5""","comma, here"\n'
        assert ingested.format == "tsv"
        rows = list(csv.reader(io.StringIO(ingested.text.decode())))
        assert rows == [["size", "note"], ['5"', "comma, here"]]


def test_valid_json_is_kept_as_written() -> None:
    data = codecs.BOM_UTF8 + b'{"b": 1,\r\n "a": [1.5, null]}\r\n'
    ingested = ingest(data, "x.json")
    assert ingested.text == b'{"b": 1,\n "a": [1.5, null]}\n'
    assert ingested.media_type == "application/json"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"a": 1,}', "invalid JSON at line 1, column 9"),
        (b"", "invalid JSON at line 1, column 1"),
        (b'{"a": NaN}', "NaN is not a JSON value"),
        (b"[" * 100_000 + b"]" * 100_000, "invalid JSON"),
    ],
)
def test_invalid_json_is_rejected(data: bytes, message: str) -> None:
    with pytest.raises(UnsupportedSource, match=message):
        ingest(data, "x.json")


def test_text_drops_the_bom_and_normalises_line_ends() -> None:
    ingested = ingest(codecs.BOM_UTF8 + "héllo\r\nworld\r".encode(), "a.txt")
    assert ingested.text == "héllo\nworld\n".encode()
    assert ingested.format == "text"


def test_markdown_and_utf16_with_its_mark() -> None:
    data = codecs.BOM_UTF16_LE + "# Title\r\n\nbody ✓\n".encode("utf-16-le")
    ingested = ingest(data, "notes.md")
    assert ingested.text == "# Title\n\nbody ✓\n".encode()
    assert ingested.media_type == "text/markdown"


def test_invalid_utf8_is_rejected_not_guessed() -> None:
    with pytest.raises(UnsupportedSource, match=r"not valid UTF-8 \(byte 3\)"):
        ingest("caf\u00e9".encode("cp1252"), "a.txt")


def test_nul_characters_mean_binary() -> None:
    with pytest.raises(UnsupportedSource, match="NUL"):
        ingest(b"abc\x00def", "a.txt")


@pytest.mark.parametrize(
    "data",
    [
        b"definitely not a zip",
        b"",
        _xlsx([["a", 1]])[:-100],
        b"PK\x05\x06" + b"\x00" * 18,
    ],
)
def test_corrupt_xlsx_is_rejected(data: bytes) -> None:
    with pytest.raises(UnsupportedSource, match="XLSX"):
        ingest(data, "book.xlsx")


def test_a_zip_that_is_not_a_workbook_is_rejected() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("hello.txt", "hi")
    with pytest.raises(UnsupportedSource, match="could not be read"):
        ingest(out.getvalue(), "book.xlsx")


def test_the_attachment_size_is_bounded_before_parsing() -> None:
    limits = SourceLimits(attachment_bytes=10)
    with pytest.raises(SourceTooLarge, match="11 bytes, over the bound of 10"):
        ingest(b"x" * 11, "a.txt", limits=limits)
    assert ingest(b"x" * 10, "a.txt", limits=limits).text == b"x" * 10


def test_the_text_size_is_bounded() -> None:
    limits = SourceLimits(text_bytes=100)
    with pytest.raises(SourceTooLarge, match="over the bound of 100"):
        ingest(b"1,2\n" * 26, "a.csv", limits=limits)
    with pytest.raises(SourceTooLarge):
        ingest(_xlsx([["abcdefghij"]] * 20), "a.xlsx", limits=limits)


def test_the_unpacked_size_of_a_workbook_is_bounded() -> None:
    with pytest.raises(SourceTooLarge, match="unpacks to"):
        ingest(_xlsx([["a"]]), "a.xlsx", limits=SourceLimits(unpacked_bytes=1000))


def test_errors_share_the_source_error_base() -> None:
    assert issubclass(UnsupportedSource, SourceError)
    assert issubclass(SourceTooLarge, SourceError)


def test_the_northstar_workbook_ingests_to_its_measurements() -> None:
    ingested = ingest(NORTHSTAR.read_bytes(), "northstar.xlsx", XLSX)
    text = ingested.text.decode()
    assert "Prototype A,9\n" in text
    assert "Prototype B,7.5\n" in text
    assert text.startswith("# sheet: Runtime\n")
    rows = list(csv.reader(line for line in text.splitlines() if not line.startswith("#")))
    assert rows[0] == ["Prototype", "Measured runtime (hours)"]
    result = mean(row[1] for row in rows[1:])
    assert (result.value, result.n) == (8.25, 2)


def test_the_northstar_script_reproduces_the_committed_workbook() -> None:
    build = runpy.run_path(str(ROOT / "scripts" / "make_northstar.py"))["build"]
    assert build() == NORTHSTAR.read_bytes()

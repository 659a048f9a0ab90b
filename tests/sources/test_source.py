import dataclasses
import datetime
import json

import pytest

from corral.sources import Source


def _source(original: bytes | None) -> Source:
    return Source(
        id="src_x",
        kind="attachment" if original is not None else "read_source",
        filename="t.csv",
        media_type="text/csv",
        text=b"a,b\n",
        original=original,
        text_sha256="t" * 64,
        original_sha256="o" * 64 if original is not None else None,
        created_at=datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    )


def test_info_is_metadata_only_and_json_ready() -> None:
    info = _source(b"a,b\r\n").info()
    assert info == {
        "id": "src_x",
        "kind": "attachment",
        "filename": "t.csv",
        "media_type": "text/csv",
        "text_bytes": 4,
        "original_bytes": 5,
        "text_sha256": "t" * 64,
        "original_sha256": "o" * 64,
        "created_at": "2024-01-01T00:00:00+00:00",
    }
    assert json.loads(json.dumps(info)) == info
    assert _source(None).info()["original_bytes"] is None


def test_size_counts_text_and_original() -> None:
    assert _source(b"12345").size == 9
    assert _source(None).size == 4


def test_repr_leaves_the_content_out() -> None:
    text = repr(_source(b"secret-original"))
    assert "src_x" in text
    assert "a,b" not in text
    assert "secret-original" not in text


def test_sources_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        _source(None).text = b"changed"  # type: ignore[misc]

import dataclasses
import datetime
import hashlib
import json
import re
import threading
from pathlib import Path

import pytest

import corral.sources
from corral.engine import Input
from corral.errors import SourceError, SourceNotFound, SourceTooLarge, UnsupportedSource
from corral.sources import SourceLimits, SourceRegistry

NORTHSTAR = Path(__file__).resolve().parents[2] / "examples" / "northstar.xlsx"
ID = re.compile(r"src_[A-Za-z0-9_-]{22}")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_attachment_keeps_text_original_and_digests() -> None:
    registry = SourceRegistry()
    data = b"\xef\xbb\xbfa,b\r\n1,2\r\n"
    source = registry.add_attachment(data, "uploads/table.csv", "text/csv")
    assert source.kind == "attachment"
    assert source.filename == "table.csv"
    assert source.media_type == "text/csv"
    assert source.text == b"a,b\n1,2\n"
    assert source.original == data
    assert source.text_sha256 == hashlib.sha256(source.text).hexdigest()
    assert source.original_sha256 == hashlib.sha256(data).hexdigest()
    assert source.created_at.tzinfo is datetime.UTC
    assert registry.get(source.id) is source


def test_ids_are_opaque_unguessable_and_unique() -> None:
    registry = SourceRegistry(limits=SourceLimits(max_count=2000))
    ids = [registry.add_text("x", "n").id for _ in range(2000)]
    assert all(ID.fullmatch(source_id) for source_id in ids)
    assert len(set(ids)) == len(ids)
    # 128 random bits: the random parts share no common prefix beyond chance.
    assert len({source_id[4:8] for source_id in ids}) > 1500


def test_an_id_from_another_registry_is_rejected() -> None:
    first, second = SourceRegistry(), SourceRegistry()
    source = first.add_text("secret", "a.txt")
    with pytest.raises(SourceNotFound):
        second.get(source.id)
    with pytest.raises(SourceNotFound):
        second.resolve([source.id])
    with pytest.raises(SourceNotFound):
        second.to_input(source)


def test_a_forged_source_with_a_real_id_is_refused() -> None:
    registry = SourceRegistry()
    source = registry.add_text("measured", "a.txt")
    forged = dataclasses.replace(source, text=b"invented")
    with pytest.raises(SourceNotFound, match="does not belong"):
        registry.to_input(forged)


def test_unknown_ids_are_rejected_without_naming_other_ids() -> None:
    registry = SourceRegistry()
    known = registry.add_text("a", "a.txt")
    with pytest.raises(SourceNotFound, match="'src_invented'") as caught:
        registry.resolve([known.id, "src_invented"])
    assert known.id not in str(caught.value)


def test_resolve_keeps_the_order_given() -> None:
    registry = SourceRegistry()
    a, b, c = (registry.add_text(name, name) for name in "abc")
    assert registry.resolve([c.id, a.id, b.id]) == [c, a, b]
    assert registry.resolve([]) == []


def test_duplicates_are_rejected() -> None:
    registry = SourceRegistry()
    a, b = registry.add_text("a", "a"), registry.add_text("b", "b")
    with pytest.raises(SourceError, match="listed twice") as caught:
        registry.resolve([a.id, b.id, a.id])
    assert b.id not in str(caught.value)


def test_too_many_ids_are_rejected() -> None:
    registry = SourceRegistry()
    ids = [registry.add_text(str(i), str(i)).id for i in range(5)]
    assert len(registry.resolve(ids[:4])) == 4
    with pytest.raises(SourceError, match="at most 4 source ids per call, got 5") as caught:
        registry.resolve(ids)
    assert not any(source_id in str(caught.value) for source_id in ids)
    assert len(registry.resolve(ids, max_sources=5)) == 5


def test_a_bare_string_is_not_a_list_of_ids() -> None:
    registry = SourceRegistry()
    source = registry.add_text("a", "a")
    with pytest.raises(SourceError, match="not a single string"):
        registry.resolve(source.id)


def test_expired_sources_stop_resolving() -> None:
    clock = FakeClock()
    registry = SourceRegistry(ttl=60, clock=clock)
    old = registry.add_text("old", "old.txt")
    clock.now += 30
    fresh = registry.add_text("fresh", "fresh.txt")
    clock.now += 30
    with pytest.raises(SourceNotFound, match="expired"):
        registry.get(old.id)
    assert registry.get(fresh.id) is fresh
    assert [info["id"] for info in registry.list()] == [fresh.id]
    assert registry.total_bytes == len(b"fresh")


def test_ttl_must_be_positive() -> None:
    with pytest.raises(ValueError, match="ttl"):
        SourceRegistry(ttl=0)


def test_removed_sources_stop_resolving() -> None:
    registry = SourceRegistry()
    source = registry.add_text("a", "a")
    registry.remove(source.id)
    assert len(registry) == 0
    with pytest.raises(SourceNotFound):
        registry.get(source.id)
    with pytest.raises(SourceNotFound):
        registry.remove(source.id)
    with pytest.raises(SourceNotFound):
        registry.to_input(source)


def test_to_input_passes_text_original_media_type_and_digests() -> None:
    registry = SourceRegistry()
    data = NORTHSTAR.read_bytes()
    source = registry.add_attachment(data, "northstar.xlsx")
    item = registry.to_input(source)
    assert isinstance(item, Input)
    assert item.id == source.id
    assert b"Prototype A,9\n" in item.text
    assert b"Prototype B,7.5\n" in item.text
    assert item.original == data
    assert (
        item.media_type
        == source.media_type
        == ("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")
    )
    assert item.text_sha256 == hashlib.sha256(item.text).hexdigest()
    assert item.original_sha256 == hashlib.sha256(data).hexdigest()


def test_read_source_texts_have_no_original() -> None:
    registry = SourceRegistry()
    source = registry.add_text("# Page\n", "page.md", media_type="text/markdown")
    assert (source.kind, source.original, source.original_sha256) == ("read_source", None, None)
    item = registry.to_input(source)
    assert (item.original, item.media_type, item.text) == (None, "text/markdown", b"# Page\n")


def test_add_text_bounds_and_encoding() -> None:
    registry = SourceRegistry(limits=SourceLimits(text_bytes=4))
    with pytest.raises(SourceTooLarge, match="5 bytes"):
        registry.add_text("héllo"[:4], "a")
    with pytest.raises(UnsupportedSource, match="UTF-8"):
        registry.add_text("\ud800", "a")
    assert len(registry) == 0


def test_failed_ingestion_registers_nothing() -> None:
    registry = SourceRegistry()
    for data, name in ((b"not a zip", "a.xlsx"), (b"{", "a.json"), (b"caf\xe9", "a.txt")):
        with pytest.raises(UnsupportedSource):
            registry.add_attachment(data, name)
    assert len(registry) == 0
    assert registry.list() == []


def test_total_bytes_are_bounded_per_registry() -> None:
    registry = SourceRegistry(limits=SourceLimits(total_bytes=20))
    registry.add_attachment(b"0123456789", "a.txt")  # text + original = 20 bytes
    with pytest.raises(SourceTooLarge, match="21 bytes, over the bound of 20"):
        registry.add_text("x", "b")
    assert len(registry) == 1


def test_the_number_of_sources_is_bounded() -> None:
    registry = SourceRegistry(limits=SourceLimits(max_count=2))
    registry.add_text("a", "a")
    registry.add_text("b", "b")
    with pytest.raises(SourceError, match="already holds 2 sources"):
        registry.add_text("c", "c")


def test_bounds_hold_across_threads() -> None:
    registry = SourceRegistry(limits=SourceLimits(max_count=100))
    added: list[str] = []
    refused: list[SourceError] = []

    def add() -> None:
        for _ in range(50):
            try:
                added.append(registry.add_text("x", "x").id)
            except SourceError as exc:
                refused.append(exc)

    threads = [threading.Thread(target=add) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert (len(added), len(refused), len(registry)) == (100, 300, 100)


def test_list_is_metadata_only_and_json_ready() -> None:
    registry = SourceRegistry()
    source = registry.add_attachment(b"a,b\n", "t.csv")
    registry.add_text("page", "p.md")
    listing = registry.list()
    assert [info["filename"] for info in listing] == ["t.csv", "p.md"]
    first = listing[0]
    assert first == source.info()
    assert (first["text_bytes"], first["original_bytes"]) == (4, 4)
    assert listing[1]["original_bytes"] is None
    json.dumps(listing)
    assert "a,b" not in repr(source)


def test_display_names_are_stripped_of_directories_and_control_characters() -> None:
    registry = SourceRegistry()
    assert registry.add_text("a", "..\\..\\etc/pass\nwd").filename == "pass wd"


def test_the_public_api() -> None:
    assert corral.sources.__all__ == sorted(corral.sources.__all__)
    for name in corral.sources.__all__:
        assert hasattr(corral.sources, name)
    assert SourceRegistry.__module__ == "corral.sources"
    assert corral.sources.ingest.__module__ == "corral.sources"

from __future__ import annotations

from corral.mistral._naming import connector_namespace, resolve_name, sanitize
from corral.tools import TOOL_NAME_PATTERN


def test_sanitize_replaces_foreign_characters() -> None:
    assert sanitize("send.mail now/ü") == "send_mail_now__"
    assert sanitize("") == "_"
    assert connector_namespace("outlook calendar") == "mistral_cn_outlook_calendar"


def test_original_name_when_free() -> None:
    assert resolve_name("search", "outlook", lambda n: False) == "search"


def test_suffix_then_numbers() -> None:
    taken = {"read", "read__fs", "read__fs_2"}
    assert resolve_name("read", "fs", taken.__contains__) == "read__fs_3"


def test_long_names_keep_their_suffix_and_stay_valid() -> None:
    remote = "x" * 80
    first = resolve_name(remote, "c", lambda n: False)
    assert first == "x" * 64
    taken = {first}
    second = resolve_name(remote, "c" * 90, taken.__contains__)
    assert len(second) == 64
    assert second.endswith("__" + "c" * 40)
    taken.add(second)
    third = resolve_name(remote, "c" * 90, taken.__contains__)
    assert third.endswith("_2")
    assert len(third) == 64
    for name in (first, second, third):
        assert TOOL_NAME_PATTERN.fullmatch(name)

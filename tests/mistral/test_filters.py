from __future__ import annotations

from typing import Any

from corral.mistral import filter_chat_completions_tools

FUNCTION = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def test_keeps_functions_image_generation_and_connectors() -> None:
    entries: list[dict[str, Any]] = [
        FUNCTION,
        {"type": "image_generation"},
        {"type": "connector", "connector_id": "3f0c"},
        {"type": "web_search"},
        {"type": "web_search_premium"},
        {"type": "code_interpreter"},
        {"type": "document_library", "library_ids": ["x"]},
        {"no": "type"},
    ]
    warnings: list[str] = []
    kept = filter_chat_completions_tools(entries, warnings.append)
    assert kept == entries[:3]
    assert warnings[0] == (
        "Mistral chat completions does not support the server tool 'web_search' "
        "(it is Conversations-only); dropped. Use the web_search / mistral_code_interpreter tool."
    )
    assert [w.split("'")[1] for w in warnings] == [
        "web_search",
        "web_search_premium",
        "code_interpreter",
        "document_library",
        "(no type)",
    ]


def test_one_warning_per_type_per_session() -> None:
    warnings: list[str] = []
    warned: set[str] = set()
    for _ in range(3):
        kept = filter_chat_completions_tools(
            [FUNCTION, {"type": "web_search"}, {"type": "web_search"}], warnings.append, warned
        )
        assert kept == [FUNCTION]
    assert len(warnings) == 1
    assert warned == {"web_search"}

from __future__ import annotations

import httpx
import pytest

from corral.errors import ToolNameTaken
from corral.mistral import MistralClient, MistralSettings, register_mistral_tools
from corral.tools import ToolRegistry

from .conftest import BASE_URL
from .fake_mistral import FakeMistral
from .world import populate

pytestmark = pytest.mark.anyio

STATIC = ["mistral_code_interpreter", "web_search"]


async def test_disabled_connector_tools_register_only_the_static_tools(
    fake: FakeMistral, client: MistralClient, registry: ToolRegistry
) -> None:
    populate(fake)
    settings = MistralSettings(
        api_key="test-key", base_url=BASE_URL, connector_tools_enabled=False, auto_load=("outlook",)
    )
    assert await register_mistral_tools(registry, settings, client) is None
    assert registry.names() == STATIC
    assert registry.active_names() == STATIC
    assert fake.requests == []  # no listing, and autoLoad ignored


async def test_without_a_key_discovery_is_skipped_with_one_warning(
    fake: FakeMistral, registry: ToolRegistry
) -> None:
    populate(fake)
    warnings: list[str] = []
    settings = MistralSettings(base_url=BASE_URL)
    async with httpx.AsyncClient(transport=fake.transport()) as http:
        client = MistralClient.from_settings(settings, http=http)
        loader = await register_mistral_tools(registry, settings, client, warn=warnings.append)
        result = await registry.call("web_search", {"query": "q"})
    assert loader is None
    assert warnings == ["MISTRAL_API_KEY is not set; Mistral connector tools are off."]
    assert registry.active_names() == STATIC
    assert result.error is not None
    assert result.error["kind"] == "config"
    assert fake.requests == []


async def test_enabled_with_a_key_starts_the_loader(
    fake: FakeMistral, client: MistralClient, settings: MistralSettings, registry: ToolRegistry
) -> None:
    populate(fake)
    loader = await register_mistral_tools(registry, settings, client)
    assert loader is not None
    assert registry.unknown_tool_hint is not None
    assert "mistral_connector_load" in registry.unknown_tool_hint
    for name in STATIC:
        tool = registry.get(name)
        assert tool.namespace is not None
        assert tool.namespace.name == "mistral"
        assert tool.annotations.read_only_hint is True


async def test_names_already_taken_are_refused(
    client: MistralClient, settings: MistralSettings, registry: ToolRegistry
) -> None:
    settings = MistralSettings(api_key="test-key", connector_tools_enabled=False)
    await register_mistral_tools(registry, settings, client)
    with pytest.raises(ToolNameTaken):
        await register_mistral_tools(registry, settings, client)

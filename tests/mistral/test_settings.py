from __future__ import annotations

from typing import Any

import pytest

from corral.errors import ConfigError
from corral.mistral import DEFAULT_BASE_URL, DEFAULT_SEARCH_MODEL, MistralSettings


def test_defaults() -> None:
    settings = MistralSettings.load({}, {})
    assert settings == MistralSettings()
    assert settings.api_key is None
    assert settings.base_url == DEFAULT_BASE_URL == "https://api.mistral.ai"
    assert settings.search_model == DEFAULT_SEARCH_MODEL == "mistral-small-latest"
    assert settings.connector_tools_enabled is True
    assert settings.auto_load == ()
    assert settings.max_output_chars == 64_000


def test_file_values() -> None:
    toml = {
        "server": {"port": 1},  # other sections are not ours to judge
        "mistral": {
            "knowledge": {"searchModel": "magistral-medium-latest"},
            "connectorTools": {"enabled": False, "autoLoad": ["outlook_calendar", "outlook"]},
        },
    }
    settings = MistralSettings.load(toml, {"MISTRAL_API_KEY": " k "})
    assert settings.search_model == "magistral-medium-latest"
    assert settings.connector_tools_enabled is False
    assert settings.auto_load == ("outlook_calendar", "outlook")
    assert settings.api_key == "k"


def test_the_key_never_shows_in_repr() -> None:
    assert "sekrit" not in repr(MistralSettings.load({}, {"MISTRAL_API_KEY": "sekrit"}))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("https://api.mistral.ai/v1/", "https://api.mistral.ai"),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080"),
        ("http://proxy/mistral/", "http://proxy/mistral"),
        ("", DEFAULT_BASE_URL),
    ],
)
def test_base_url_loses_trailing_slash_and_v1(raw: str, expected: str) -> None:
    assert MistralSettings.load({}, {"MISTRAL_BASE_URL": raw}).base_url == expected


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ("0", False),
        ("false", False),
        (" OFF ", False),
        ("False", False),
        ("1", True),
        ("yes", True),
        ("", True),
        (None, True),
    ],
)
def test_env_switch_applies_when_the_file_is_silent(env: str | None, expected: bool) -> None:
    environ = {} if env is None else {"MISTRAL_CONNECTOR_TOOLS": env}
    assert MistralSettings.load({}, environ).connector_tools_enabled is expected


@pytest.mark.parametrize(("file_value", "env"), [(True, "off"), (False, "1")])
def test_the_file_wins_over_the_env(file_value: bool, env: str) -> None:
    toml = {"mistral": {"connectorTools": {"enabled": file_value}}}
    settings = MistralSettings.load(toml, {"MISTRAL_CONNECTOR_TOOLS": env})
    assert settings.connector_tools_enabled is file_value


@pytest.mark.parametrize(
    ("toml", "match"),
    [
        ({"mistral": {"chat": {}}}, r"unknown key 'chat' in \[mistral\]"),
        ({"mistral": {"knowledge": {"model": "x"}}}, r"'model' in \[mistral.knowledge\]"),
        ({"mistral": {"knowledge": {"searchModel": ""}}}, "searchModel"),
        ({"mistral": {"knowledge": {"searchModel": 3}}}, "searchModel"),
        ({"mistral": {"connectorTools": {"enabled": "no"}}}, "enabled"),
        ({"mistral": {"connectorTools": {"autoLoad": "outlook"}}}, "autoLoad"),
        ({"mistral": {"connectorTools": {"autoLoad": [1]}}}, "autoLoad"),
        ({"mistral": []}, r"\[mistral\] must be a table"),
    ],
)
def test_bad_values_are_config_errors(toml: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        MistralSettings.load(toml, {})


def test_any_model_id_is_accepted_at_config_time() -> None:
    toml = {"mistral": {"knowledge": {"searchModel": "mistral-large-4"}}}
    assert MistralSettings.load(toml, {}).search_model == "mistral-large-4"

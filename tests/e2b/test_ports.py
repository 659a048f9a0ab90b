"""The port proxy's own logic: where get_host points, who may come in, and its bounds. The
proxying itself, into a real sandbox's namespace, is tested with the SDK (test_sdk.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from corral._config import Config
from corral.e2b._lifecycle import Lifecycle, adopted_fields, labels_of
from corral.e2b._port_access import PortAccess
from corral.e2b._ports import TOKEN_HEADER, BudgetSpent, Ports, port_fields, sandbox_domain
from corral.errors import ConfigError


def test_domain_is_the_configured_one_else_the_host_asked() -> None:
    assert sandbox_domain("sbx.example.com", "127.0.0.1:8000") == "sbx.example.com"
    assert sandbox_domain("", "Corral.Example.com:8443") == "corral.example.com:8443"
    assert sandbox_domain("", "[::1]:8000") == "[::1]:8000"
    # No host, or one that is no host name: the SDK keeps its own E2B_DOMAIN.
    for bad in (None, "", "a b", "x/y", "evil.com\r\nX: 1", "a" * 300):
        assert sandbox_domain("", bad) is None


def test_config_from_file_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "corral.toml"
    path.write_text('[e2b]\ndomain = "sbx.example.com"\nport_max_connections = 8\n')
    config = Config.load(flags={"config": str(path)}, environ={})
    assert (config.e2b_domain, config.port_max_connections) == ("sbx.example.com", 8)
    assert config.port_max_bytes == 1 << 30
    env = Config.load(environ={"CORRAL_E2B_PORT_MAX_BYTES": "4096"})
    assert env.port_max_bytes == 4096
    with pytest.raises(ConfigError, match="port_max_connections"):
        Config.load(environ={"CORRAL_E2B_PORT_MAX_CONNECTIONS": "0"})


def _scope(token: str | None) -> dict[str, object]:
    headers = [] if token is None else [(TOKEN_HEADER, token.encode())]
    return {"type": "http", "headers": headers}


def test_a_private_sandbox_needs_its_own_token_and_a_public_one_none() -> None:
    ports = Ports(max_connections=2, max_bytes=100)
    private, other = PortAccess(public=False), PortAccess(public=False)
    assert ports._refusal(private, _scope(private.token)) is None
    for wrong in (None, "", other.token):
        refused = ports._refusal(private, _scope(wrong))
        assert refused is not None
        assert refused[0] == 403
    public = PortAccess(public=True)
    assert ports._refusal(public, _scope(None)) is None
    assert port_fields(private, "d.example") == {
        "domain": "d.example", "trafficAccessToken": private.token,
    }  # fmt: skip
    assert port_fields(public, None) == {}  # public: no token to give


def test_connections_and_bytes_are_bounded() -> None:
    ports = Ports(max_connections=2, max_bytes=100)
    access = PortAccess(public=True)
    access.connections = 2
    assert ports._refusal(access, _scope(None)) == (
        429, "the sandbox already has 2 connections in",
    )  # fmt: skip
    access.connections = 0
    ports.count(access, 100)
    with pytest.raises(BudgetSpent):
        ports.count(access, 1)
    refused = ports._refusal(access, _scope(None))
    assert refused is not None
    assert refused[0] == 429


def test_a_sandboxs_access_outlives_a_pause_to_disk_and_a_restart() -> None:
    # Kept in the labels its session keeps: a restarted server lets in the same token, and
    # a public sandbox stays public.
    for access in (PortAccess(public=True), PortAccess(public=False)):
        sandbox = SimpleNamespace(
            id="s1", owner="alice", template="base", access_token="envd", metadata={},
            env_vars={}, started_at=1.0, lifecycle=Lifecycle(), ports=access,
        )  # fmt: skip
        labels = labels_of(cast(Any, sandbox))
        back = adopted_fields(cast(Any, SimpleNamespace(id="session", labels=labels)))
        assert back is not None
        assert (back.public, back.traffic_token) == (access.public, access.token)

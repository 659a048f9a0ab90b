"""``"network"`` on corral's own routes, against real sandboxes and the tests' stand-in
internet: given only when asked, inside the ceiling, never to a key without network, never
on DIAL's routes or ``/run_code``; a refusal is a 422 naming ``network``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral._config import ApiKey, Config
from corral._limits import Limits
from corral.engine import Engine
from corral.http import create_app
from corral.network import Egress
from tests.http.httpkit import OPS, client_for
from tests.network.conftest import NAMES, ceiling_for
from tests.network.conftest import internet as internet  # the stand-in, as a fixture here
from tests.network.internet import Internet

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

NETWORKED, OFFLINE = "networked-key", "offline-key"
FETCH = """
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen("http://example.test/", timeout=5).read().decode(), end="")
except urllib.error.URLError as exc:
    print(type(exc.reason).__name__)
"""
HELLO = "hello from the stand-in internet\n"


@pytest.fixture(scope="module")
async def engine(internet: Internet) -> AsyncIterator[Engine]:
    egress = Egress(ceiling_for(internet))
    async with Engine(capacity=2, limits=Limits(timeout=20), egress=egress) as started:
        yield started


@pytest.fixture
def config(internet: Internet, tmp_path: Path) -> Config:
    ceiling = ceiling_for(internet)
    return Config(
        mode="gateway",
        data_dir=tmp_path / "data",
        timeout=20,
        api_keys=(
            ApiKey(key=NETWORKED, user="nina", roles=("coder",)),
            ApiKey(key=OFFLINE, user="otto", roles=("coder",), network=False),
        ),
        allow=tuple(ceiling.allow.as_list()),
        private_allow=tuple(ceiling.private_allow.as_list()),
        hosts={name: tuple(map(str, answers)) for name, answers in ceiling.hosts.items()},
    )


@pytest.fixture
async def client(engine: Engine, config: Config) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(create_app(engine, config), NETWORKED) as http:
        yield http


async def execute(client: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await client.post("/v1/execute", json={"code": FETCH, **body}, timeout=30)


async def test_a_run_has_a_network_only_when_it_asks(client: httpx.AsyncClient) -> None:
    asked = await execute(client, network=True)
    assert asked.status_code == 200, asked.text
    assert asked.json()["stdout"] == HELLO
    plain = await execute(client)
    assert plain.json()["stdout"] == "gaierror\n"
    part = await execute(client, network={"allow": ["example.test"]})
    assert part.json()["stdout"] == HELLO


@pytest.mark.parametrize(
    ("network", "named"),
    [
        ({"allow": ["pypi.org"]}, "pypi.org"),
        ({"allow": ["not a host!"]}, "not a host!"),
        ({"allow": ["example.test"], "inject": {"secure.test": {"X-Key": "v"}}}, "secure.test"),
        ({"allow": ["example.test"], "inject": {"example.test": {"Bad Header": "v"}}}, "Bad"),
    ],
)
async def test_what_the_ceiling_does_not_cover_is_422_naming_network(
    client: httpx.AsyncClient, network: dict[str, Any], named: str
) -> None:
    response = await execute(client, network=network)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "network"
    assert named in error["message"]


async def test_a_key_without_network_is_refused_with_422(engine: Engine, config: Config) -> None:
    async with client_for(create_app(engine, config), OFFLINE) as offline:
        response = await execute(offline, network=True)
        opened = await offline.post(f"{OPS}/open_session", json={"network": True})
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "network"
    assert opened.status_code == 422


async def test_a_session_keeps_the_network_it_was_opened_with(
    client: httpx.AsyncClient,
) -> None:
    opened = await client.post(f"{OPS}/open_session", json={"network": {"allow": ["example.test"]}})
    assert opened.status_code == 200, opened.text
    session_id = opened.json()["sessionId"]
    try:
        inside = await execute(client, sessionId=session_id)
        assert inside.json()["stdout"] == HELLO
        changed = await execute(client, sessionId=session_id, network=True)
        assert changed.status_code == 422
        assert changed.json()["error"]["field"] == "network"
    finally:
        await client.post(f"{OPS}/close_session", json={"sessionId": session_id})


async def test_dial_and_run_code_never_give_a_network(client: httpx.AsyncClient) -> None:
    dial = await client.post(f"{OPS}/execute_code", json={"code": FETCH})
    assert dial.status_code == 200, dial.text
    assert "gaierror" in json.dumps(dial.json())
    with_field = await client.post(f"{OPS}/execute_code", json={"code": FETCH, "network": True})
    assert with_field.status_code == 400  # not a field of DIAL's: refused, never honoured
    run_code = await client.post("/run_code", json={"code": FETCH, "language": "python"})
    assert run_code.json()["run_result"]["stdout"] == "gaierror\n"


async def test_metrics_count_what_egress_let_out_and_refused(client: httpx.AsyncClient) -> None:
    await execute(client, network=True)
    await execute(client, network={"allow": [NAMES[1]]})  # example.test is then NXDOMAIN
    metrics = (await client.get("/metrics")).text
    assert 'corral_egress_connections_total{verdict="allowed"}' in metrics
    denied = [line for line in metrics.splitlines() if 'verdict="denied"' in line]
    assert denied
    assert float(denied[0].rsplit(" ", 1)[1]) >= 1
    assert "corral_egress_tenant_bytes_total{tenant=" in metrics, [
        line for line in metrics.splitlines() if "tenant" in line
    ]

"""The unmodified E2B SDK's network options against ``corral serve`` with a ``[network]``
ceiling that reaches a stand-in internet (tests/network/internet.py), at each SDK pair."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2b.conftest import KEY, SDK_PAIRS, Server, run_script, sdk_python, serving
from tests.network.conftest import NAMES, why_not
from tests.network.internet import SECRET, Internet, start

pytestmark = [pytest.mark.isolation, pytest.mark.network, pytest.mark.timeout(900)]

NO_NETWORK_KEY = "e2b_" + "00112233445566778899aabbccddeeff"
SCENARIOS = Path(__file__).with_name("sdk_network_scenarios.py")
HELLO = "hello from the stand-in internet\n"


def _config(internet: Internet) -> str:
    names = [*NAMES, f"{internet.address}/32"]
    hosts = "\n".join(f'"{name}" = "{internet.address}"' for name in NAMES)
    return f"""
[server]
data_dir = "{{data_dir}}"

[engine]
timeout = 30

[[server.api_keys]]
key = "{KEY}"
user = "alice"

[[server.api_keys]]
key = "{NO_NETWORK_KEY}"
user = "carol"
network = false

[network]
allow = {json.dumps(names)}
private_allow = ["{internet.address}/32"]
upstream_ca = "{internet.ca_pem}"

[network.hosts]
{hosts}

[packages]
index_url = "http://pypi.test/simple"
"""


@pytest.fixture(scope="module")
def internet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Internet]:
    reason = why_not()
    if reason:
        pytest.skip(reason)
    made = start(tmp_path_factory.mktemp("e2b-internet"), 250)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def network_server(
    internet: Internet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("e2b-network-server")
    config = data_dir.parent / f"{data_dir.name}.toml"
    config.write_text(_config(internet).replace("{data_dir}", str(data_dir)))
    with serving(data_dir, {}, "--config", str(config)) as server:
        yield server


_seen: dict[tuple[str, str], dict[str, Any]] = {}
_server: list[Server] = []


@pytest.fixture(scope="module", params=SDK_PAIRS, ids=lambda pair: f"e2b-{pair[0]}")
def sdk(
    request: pytest.FixtureRequest, network_server: Server, internet: Internet
) -> dict[str, Any]:
    pair: tuple[str, str] = request.param
    _server[:] = [network_server]
    if pair not in _seen:
        args = (network_server.url, KEY, NO_NETWORK_KEY, SECRET, str(internet.ca_pem))
        _seen[pair] = run_script(sdk_python(*pair), SCENARIOS, *args)
    return _seen[pair]


def ok(sdk: dict[str, Any], name: str) -> dict[str, Any]:
    outcome = sdk[name]
    assert "ok" in outcome, (
        f"{name} raised {outcome.get('raised')}: {outcome.get('traceback')}\n{_egress_log()}"
    )
    value: dict[str, Any] = outcome["ok"]
    return value


def _egress_log() -> str:
    """The server's own word on each connection it refused or ended, for a failure to show."""
    said = _server[0].said if _server else []
    return "the server's egress log:\n" + "".join(line for line in said if "egress" in line)


def test_a_sandbox_starts_with_all_of_the_ceiling(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "default_is_the_ceiling")
    assert seen["fetched"] == [HELLO], _egress_log()
    assert seen["allow_internet_access"] is True


def test_allow_internet_access_false_is_no_network(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "no_internet_access")
    assert seen["fetched"] == ["gaierror"]
    assert seen["allow_internet_access"] is False


def test_allow_out_is_an_exception_to_deny_out(sdk: dict[str, Any]) -> None:
    assert ok(sdk, "deny_everything_but_one")["fetched"] == [HELLO, "gaierror"], _egress_log()


def test_deny_out_refuses_the_name_it_lists(sdk: dict[str, Any]) -> None:
    assert ok(sdk, "deny_one_name")["fetched"] == [HELLO, "gaierror"], _egress_log()


def test_update_network_changes_a_running_sandbox(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "update_network_live")
    if "skipped" in seen:
        pytest.skip(seen["skipped"])
    assert seen["before"] == [HELLO], _egress_log()
    assert seen["after"] == ["gaierror"]
    assert seen["again"] == [HELLO], (
        _egress_log()
    )  # an update that leaves everything out clears the rules


def test_rules_add_headers_over_http_and_https_and_the_code_never_sees_them(
    sdk: dict[str, Any],
) -> None:
    seen = ok(sdk, "rules_add_headers_the_code_never_sees")
    expected = {
        "authorization_is_secret": True,
        "authorization_present": True,
        "host": "inject.test",
    }
    assert seen["plain"] == expected
    assert seen["secure"] == expected
    assert seen["found"] == []
    assert seen["commands_saw_secret"] is False
    assert seen["info_holds_secret"] is False


def test_pip_installs_from_the_index_with_commands_run(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "pip_from_the_index_with_commands_run")
    assert seen == {"exit_code": 0, "value": "42"}


def test_a_key_with_network_false_gets_none(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "a_key_without_network")
    assert seen["fetched"] == ["gaierror"]
    assert seen["allow_internet_access"] is False


def test_options_corral_cannot_honour_are_refused(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "refused_options")
    assert "egress_proxy is not served" in seen["egress_proxy"]
    assert "not a host!" in seen["bad_entry"]

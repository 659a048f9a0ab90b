"""The E2B SDK's network options against a ``corral serve`` whose ``[network]`` reaches a
stand-in internet: run by a venv holding one SDK version.

Usage: ``python sdk_network_scenarios.py BASE_URL KEY NO_NETWORK_KEY SECRET CA_PEM``. Prints
one JSON object: for each scenario, what the sandboxed code and the SDK saw (or what the SDK
raised). Imports nothing of corral.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path
from typing import Any

BASE, KEY, NO_NETWORK_KEY, SECRET, CA_PEM = sys.argv[1:6]
os.environ.update(E2B_API_URL=BASE, E2B_SANDBOX_URL=BASE, E2B_API_KEY=KEY)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: its tests package

from e2b_code_interpreter import Sandbox  # noqa: E402

from tests.e2b.scenariokit import finish, scenario  # noqa: E402

FETCH = """
import json, socket, urllib.request, urllib.error
def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.read().decode()
    except urllib.error.URLError as exc:
        return type(exc.reason).__name__
    except OSError as exc:
        return type(exc).__name__
"""


def fetched(sbx: Any, *urls: str) -> list[Any]:
    """What each URL answered from inside the sandbox (a body, or the error's name)."""
    calls = ", ".join(f"fetch({url!r})" for url in urls)
    execution = sbx.run_code(FETCH + f"json.dumps([{calls}])")
    if execution.error is not None:
        raise RuntimeError(f"{execution.error.name}: {execution.error.value}")
    return list(json.loads(ast.literal_eval(execution.text)))


def info_network(sbx: Any) -> dict[str, Any]:
    info = sbx.get_info()
    network = getattr(info, "network", None)
    seen = {"allow_internet_access": getattr(info, "allow_internet_access", None)}
    if network is not None:
        seen["network"] = {k: v for k, v in dict(network).items() if v is not None}
    return seen


@scenario
def default_is_the_ceiling() -> dict[str, Any]:
    with Sandbox.create() as sbx:
        return {"fetched": fetched(sbx, "http://example.test/"), **info_network(sbx)}


@scenario
def no_internet_access() -> dict[str, Any]:
    with Sandbox.create(allow_internet_access=False) as sbx:
        return {"fetched": fetched(sbx, "http://example.test/"), **info_network(sbx)}


@scenario
def deny_everything_but_one() -> dict[str, Any]:
    network = {"deny_out": ["0.0.0.0/0"], "allow_out": ["example.test"]}
    with Sandbox.create(network=network) as sbx:
        return {"fetched": fetched(sbx, "http://example.test/", "http://secure.test/")}


@scenario
def deny_one_name() -> dict[str, Any]:
    with Sandbox.create(network={"deny_out": ["secure.test"]}) as sbx:
        return {"fetched": fetched(sbx, "http://example.test/", "http://secure.test/")}


@scenario
def update_network_live() -> dict[str, Any]:
    if not hasattr(Sandbox, "update_network"):
        return {"skipped": "this SDK has no update_network"}
    with Sandbox.create() as sbx:
        before = fetched(sbx, "http://example.test/")
        sbx.update_network({"deny_out": ["0.0.0.0/0"]})
        after = fetched(sbx, "http://example.test/")
        narrowed = info_network(sbx)
        sbx.update_network({})
        again = fetched(sbx, "http://example.test/")
        return {"before": before, "after": after, "again": again, **narrowed}


SEARCH = """
import os, pathlib
places = [pathlib.Path("/proc/self/environ"), pathlib.Path("/proc/1/environ")]
for root in ("/tmp", "/etc", "/home/user", "/work", "/mnt/data"):
    for path in pathlib.Path(root).rglob("*"):
        if path.is_file() and not path.is_symlink():
            places.append(path)
found = []
for place in places:
    try:
        if SECRET.encode() in place.read_bytes():
            found.append(str(place))
    except OSError:
        pass
found += [k for k, v in os.environ.items() if SECRET in v]
json.dumps([fetch("http://inject.test/headers"), fetch("https://inject.test/headers"), found])
"""


@scenario
def rules_add_headers_the_code_never_sees() -> dict[str, Any]:
    rules = {"inject.test": [{"transform": {"headers": {"Authorization": SECRET}}}]}
    with Sandbox.create(network={"rules": rules}) as sbx:
        execution = sbx.run_code(FETCH + f"SECRET = {SECRET!r}\n" + SEARCH)
        if execution.error is not None:
            raise RuntimeError(f"{execution.error.name}: {execution.error.value}")
        plain, secure, found = json.loads(ast.literal_eval(execution.text))
        commands = sbx.commands.run(f"env; grep -rl '{SECRET}' /tmp /etc /home/user || true")
        seen = info_network(sbx)
        return {
            "plain": json.loads(plain),
            "secure": json.loads(secure),
            "found": found,
            "commands_saw_secret": SECRET in commands.stdout,
            "info_holds_secret": SECRET in json.dumps(seen, default=str),
            **seen,
        }


@scenario
def pip_from_the_index_with_commands_run() -> dict[str, Any]:
    with Sandbox.create() as sbx:
        installed = sbx.commands.run("pip install -q corral_test_pkg", timeout=60)
        imported = sbx.run_code("import corral_test_pkg\ncorral_test_pkg.VALUE")
        return {"exit_code": installed.exit_code, "value": imported.text}


@scenario
def a_key_without_network() -> dict[str, Any]:
    with Sandbox.create(api_key=NO_NETWORK_KEY) as sbx:
        return {"fetched": fetched(sbx, "http://example.test/"), **info_network(sbx)}


@scenario
def refused_options() -> dict[str, Any]:
    found: dict[str, Any] = {}
    try:
        proxy = {"egress_proxy": {"address": "proxy.example.com:1080"}}
        Sandbox.create(network=proxy)
        found["egress_proxy"] = "created"
    except Exception as exc:  # noqa: BLE001
        found["egress_proxy"] = f"{type(exc).__name__}: {exc}"
    try:
        Sandbox.create(network={"allow_out": ["not a host!"]})
        found["bad_entry"] = "created"
    except Exception as exc:  # noqa: BLE001
        found["bad_entry"] = f"{type(exc).__name__}: {exc}"
    return found


finish()

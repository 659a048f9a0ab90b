"""Governed egress, tried from inside real sandboxes against a stand-in internet.

Each program prints what it saw as JSON; the test asserts on that. A refusal must be quick
and plain (a reset, a resolver that knows no such name, EPERM), never a hang.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from corral.engine import Engine
from corral.errors import NetworkPolicyError
from corral.network import NO_NETWORK, NetworkCeiling, SandboxNetwork
from tests.network.conftest import NAMES, TIGHT_BYTES, TIGHT_CONNECTIONS, never_reached
from tests.network.internet import SECRET, Internet

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

PROBE = """
import json, socket, ssl, urllib.request, urllib.error
def fetch(url, context=None):
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as reply:
            return {"status": reply.status, "body": reply.read().decode()}
    except urllib.error.URLError as exc:
        return {"error": type(exc.reason).__name__, "text": str(exc.reason)}
    except OSError as exc:
        return {"error": type(exc).__name__, "text": str(exc)}
def connect(host, port, send=b"GET / HTTP/1.0\\r\\nHost: example.test\\r\\n\\r\\n"):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        try:
            s.connect((host, port))
            s.sendall(send)
            data = s.recv(64)
        except OSError as exc:
            return {"error": type(exc).__name__}
        return {"data": data.decode(errors="replace")}
def resolve(name):
    try:
        return sorted({i[4][0] for i in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)})
    except OSError as exc:
        return {"error": type(exc).__name__}
"""


async def probe(engine: Engine, body: str, policy: SandboxNetwork | None = None) -> object:
    """What ``body`` printed last, as JSON, run with ``policy`` (all of the ceiling)."""
    policy = policy or engine_ceiling(engine).whole()
    result = await engine.run(PROBE + body, network=policy)
    assert result.outcome == "ok", result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def names_only(engine: Engine) -> SandboxNetwork:
    """The stand-in's names, and no address allowed for itself."""
    return engine_ceiling(engine).subset([*NAMES, "rebind.test"])


RESET = ({"error": "ConnectionResetError"}, {"data": ""})
"""How a refused connection looks from inside: reset before or at the first read."""


def engine_ceiling(engine: Engine) -> NetworkCeiling:
    ceiling = engine.network_ceiling
    assert ceiling is not None
    return ceiling


async def test_an_allowed_name_is_fetched_over_http(engine: Engine) -> None:
    seen = await probe(engine, 'print(json.dumps(fetch("http://example.test/")))')
    assert seen == {"status": 200, "body": "hello from the stand-in internet\n"}


async def test_a_sandbox_without_a_network_resolves_and_reaches_nothing(
    engine: Engine, internet: Internet
) -> None:
    result = await engine.run(
        PROBE + f'print(json.dumps([resolve("example.test"), connect("{internet.address}", 80)]))'
    )
    name, address = json.loads(result.stdout.strip())
    assert name == {"error": "gaierror"}
    assert address["error"] in {"OSError", "ConnectionRefusedError"}  # ENETUNREACH: no route


async def test_tls_passes_through_to_the_named_host_with_its_own_certificate(
    engine: Engine, internet: Internet
) -> None:
    ca = internet.ca_pem.read_text()
    body = f"""
context = ssl.create_default_context(cadata={ca!r})
print(json.dumps(fetch("https://secure.test/", context)))
"""
    seen = await probe(engine, body)
    assert seen == {"status": 200, "body": "hello from the stand-in internet\n"}


async def test_a_name_outside_the_policy_does_not_resolve(engine: Engine) -> None:
    seen = await probe(engine, 'print(json.dumps([resolve("pypi.org"), resolve("nope.test")]))')
    assert seen == [{"error": "gaierror"}, {"error": "gaierror"}]


async def test_an_allowed_name_resolves_to_its_addresses(
    engine: Engine, internet: Internet
) -> None:
    seen = await probe(engine, 'print(json.dumps(resolve("example.test")))')
    assert seen == sorted([internet.address, internet.address6])


async def test_an_address_the_policy_does_not_list_is_reset_at_once(
    engine: Engine, internet: Internet
) -> None:
    body = f'print(json.dumps([connect("93.184.216.34", 80), connect("{internet.address}", 80)]))'
    seen = await probe(engine, body, names_only(engine))
    assert isinstance(seen, list)
    assert seen[0] in RESET
    assert seen[1] in RESET  # the stand-in's address, never handed out by the resolver here


async def test_an_allowed_address_serving_a_refused_name_is_reset(
    engine: Engine, internet: Internet
) -> None:
    # The address was handed out for example.test; the request asks for pypi.org.
    body = f"""
resolve("example.test")
request = b"GET / HTTP/1.1\\r\\nHost: pypi.org\\r\\n\\r\\n"
print(json.dumps(connect("{internet.address}", 80, request)))
"""
    seen = await probe(engine, body, names_only(engine))
    assert seen in RESET


async def test_a_kept_alive_connection_serves_only_the_name_it_was_let_out_for(
    engine: Engine,
) -> None:
    # secure.test and pypi.org share example.test's address here, as sites share a CDN's.
    body = """
s = socket.create_connection(("example.test", 80), timeout=5)
reader = s.makefile("rb")
answers = []
for host in ("example.test", "secure.test", "pypi.org"):
    s.sendall(b"GET / HTTP/1.1\\r\\nHost: " + host.encode() + b"\\r\\n\\r\\n")
    status = reader.readline().split(b" ")[1:2]
    answers.append(status[0].decode() if status else "closed")
    if answers[-1] != "200":
        break
    length = 0
    while (line := reader.readline()) not in (b"\\r\\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    reader.read(length)
print(json.dumps(answers))
"""
    assert await probe(engine, body, names_only(engine)) == ["200", "421"]


async def test_a_name_resolving_to_loopback_gives_no_address(engine: Engine) -> None:
    seen = await probe(engine, 'print(json.dumps(resolve("rebind.test")))')
    assert seen == {"error": "gaierror"}


async def test_metadata_loopback_and_the_hosts_own_addresses_are_never_dialled(
    engine: Engine, internet: Internet
) -> None:
    # Listed in allow, and still refused: none is in private_allow.
    policy = engine_ceiling(engine).subset(never_reached(internet))
    targets = ["169.254.169.254", internet.host_address, "::ffff:169.254.169.254"]
    body = f"print(json.dumps([connect(t, 80) for t in {targets!r}]))"
    seen = await probe(engine, body, policy)
    assert isinstance(seen, list)
    for target, outcome in zip(targets, seen, strict=True):
        assert outcome in RESET, target


async def test_the_sandboxes_own_loopback_is_its_own(engine: Engine) -> None:
    # 127.0.0.2 stays inside the sandbox: nothing listens there, so the connect is refused.
    policy = engine_ceiling(engine).subset(["127.0.0.0/8"])
    seen = await probe(engine, 'print(json.dumps(connect("127.0.0.2", 80)))', policy)
    assert seen == {"error": "ConnectionRefusedError"}


async def test_a_policy_beyond_the_ceiling_is_refused_before_it_runs(engine: Engine) -> None:
    beyond = NetworkCeiling.parse(allow=["pypi.org"]).whole()
    with pytest.raises(NetworkPolicyError, match=r"pypi\.org"):
        await engine.run("print(1)", network=beyond)


async def test_udp_beyond_dns_and_raw_sockets_are_refused(
    engine: Engine, internet: Internet
) -> None:
    body = f"""
out = []
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"x", ("{internet.address}", 9999)); out.append("sent")
except OSError as exc:
    out.append(exc.errno)
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); out.append("raw")
except OSError as exc:
    out.append(exc.errno)
print(json.dumps(out))
"""
    seen = await probe(engine, body)
    assert seen == [1, 1]  # EPERM, both


async def test_an_ipv6_address_the_policy_lists_is_reached(
    engine: Engine, internet: Internet
) -> None:
    seen = await probe(engine, f'print(json.dumps(connect("{internet.address6}", 80)))')
    assert isinstance(seen, dict)
    assert seen["data"].startswith("HTTP/1.1 200")


async def test_connections_past_max_connections_are_reset(
    tight_engine: Engine, internet: Internet
) -> None:
    body = f"""
held = []
for _ in range({TIGHT_CONNECTIONS}):
    s = socket.create_connection(("{internet.address}", 80), timeout=5)
    held.append(s)
extra = connect("{internet.address}", 80)
answers = []
for s in held:
    s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
    answers.append(s.recv(12).decode())
print(json.dumps([extra, answers]))
"""
    seen = await probe(tight_engine, body)
    assert isinstance(seen, list)
    extra, answers = seen
    assert extra in RESET
    assert answers == ["HTTP/1.1 200"] * TIGHT_CONNECTIONS


async def test_a_sandbox_is_cut_past_max_bytes(tight_engine: Engine) -> None:
    body = """
got = 0
try:
    with urllib.request.urlopen("http://example.test/big?size=8388608", timeout=10) as reply:
        while chunk := reply.read(65536):
            got += len(chunk)
except Exception as exc:
    pass
print(json.dumps(got))
"""
    got = await probe(tight_engine, body)
    assert isinstance(got, int)
    assert 0 < got <= TIGHT_BYTES


async def test_a_stream_within_max_bytes_arrives_whole(engine: Engine) -> None:
    body = """
with urllib.request.urlopen("http://example.test/big?size=8388608", timeout=10) as reply:
    print(json.dumps(len(reply.read())))
"""
    assert await probe(engine, body) == 8 << 20


INJECT_CHECK = """
import os, pathlib
secret = {secret!r}
places = [pathlib.Path("/proc/self/environ"), pathlib.Path("/proc/self/cmdline")]
for root in ("/tmp", "/etc", os.getcwd(), os.path.expanduser("~")):
    for path in pathlib.Path(root).rglob("*"):
        if path.is_file() and not path.is_symlink():
            places.append(path)
found = [str(p) for p in places if secret.encode() in p.read_bytes()]
found += [k for k, v in os.environ.items() if secret in v]
print(json.dumps([fetch({url!r}, None), found]))
"""


@pytest.mark.parametrize("url", ["http://inject.test/headers", "https://inject.test/headers"])
async def test_injected_headers_reach_the_host_and_never_the_sandbox(
    engine: Engine, internet: Internet, url: str
) -> None:
    ceiling = engine_ceiling(engine)
    policy = ceiling.subset(["inject.test"], inject={"inject.test": {"Authorization": SECRET}})
    code = PROBE + INJECT_CHECK.format(secret=SECRET, url=url)
    result = await engine.run(code, network=policy)
    assert result.outcome == "ok", result.stderr
    reply, found = json.loads(result.stdout.strip().splitlines()[-1])
    assert reply.get("status") == 200, reply
    assert json.loads(reply["body"]) == {
        "authorization_is_secret": True,
        "authorization_present": True,
        "host": "inject.test",
    }
    assert found == []
    assert SECRET not in result.stdout + result.stderr


async def test_a_sessions_network_changes_live(engine: Engine) -> None:
    ceiling = engine_ceiling(engine)
    fetch = PROBE + 'print(json.dumps(fetch("http://example.test/")))'
    async with await engine.open_session(network=ceiling.subset(["example.test"])) as session:
        first = await session.run(fetch)
        await session.update_network(ceiling.subset(["secure.test"]))
        narrowed = await session.run('print(json.dumps(fetch("http://example.test/")))')
        await session.update_network(NO_NETWORK)
        closed = await session.run('print(json.dumps(fetch("http://secure.test/")))')
        await session.update_network(ceiling.subset(["example.test"]))
        again = await session.run('print(json.dumps(fetch("http://example.test/")))')
    assert json.loads(first.stdout)["status"] == 200
    assert json.loads(narrowed.stdout)["error"] == "gaierror"
    assert "error" in json.loads(closed.stdout)
    assert json.loads(again.stdout)["status"] == 200


async def test_narrowing_a_sessions_network_cuts_what_it_no_longer_allows(
    engine: Engine,
) -> None:
    ceiling = engine_ceiling(engine)
    hold = """
import socket
held = {}
for name in ("example.test", "secure.test"):
    s = socket.create_connection((name, 80), timeout=5)
    s.sendall(b"GET /hold HTTP/1.0\\r\\nHost: " + name.encode() + b"\\r\\n\\r\\n")
    head = b""
    while not head.endswith(b"x"):
        head += s.recv(1)
    held[name] = s
print("held")
"""
    # example.test's connection is cut: its end sees EOF or a reset (waited for, up to 5 s).
    # Then secure.test's, still allowed, is still open: nothing to read, and no EOF.
    after = """
import json, socket
cut = held["example.test"]
cut.settimeout(5)
try:
    seen = cut.recv(1).decode()
except OSError as exc:
    seen = type(exc).__name__
held["secure.test"].setblocking(False)
try:
    kept = held["secure.test"].recv(1).decode() or "EOF"
except BlockingIOError:
    kept = "open"
print(json.dumps([seen, kept]))
"""
    policy = ceiling.subset(["example.test", "secure.test"])
    async with await engine.open_session(network=policy) as session:
        first = await session.run(hold)
        assert first.stdout == "held\n", first.stderr
        await session.update_network(ceiling.subset(["secure.test"]))
        result = await session.run(after)
    assert result.outcome == "ok", result.stderr
    seen, kept = json.loads(result.stdout)
    assert seen in {"", "ConnectionResetError"}
    assert kept == "open"


async def test_counters_count_refusals_and_bytes(engine: Engine) -> None:
    before = engine.statistics().egress
    assert before is not None
    await probe(engine, 'print(json.dumps([fetch("http://example.test/"), resolve("no.test")]))')
    after = engine.statistics().egress
    assert after is not None
    assert after.allowed == before.allowed + 1
    assert after.denied >= before.denied + 1
    assert after.bytes > before.bytes


def _host_state() -> tuple[str, str]:
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    names = sorted(line.split(":")[1].strip() for line in links.stdout.splitlines())
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return "\n".join(names), spaces.stdout


async def test_nothing_is_made_on_the_host(engine: Engine) -> None:
    before = _host_state()
    async with await engine.open_session(network=engine_ceiling(engine).whole()) as session:
        result = await session.run(PROBE + 'print(json.dumps(fetch("http://example.test/")))')
        during = _host_state()
    assert json.loads(result.stdout)["status"] == 200
    assert during == before
    assert engine.statistics().egress.links == 0  # type: ignore[union-attr]

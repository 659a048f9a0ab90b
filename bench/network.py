"""Governed egress, side by side with the host reaching the same servers directly (issue 20).

Run as root: ``.venv/bin/python bench/network.py [--runs N] [--megabytes N] [--markdown]``.
It builds the tests' stand-in internet (a network namespace with an HTTP server, reached
over a veth pair; ``tests/network/internet.py``) and one engine whose ceiling reaches it, then:

* a fresh run with a network that makes one HTTP request, against a fresh run of ``pass``
  without one: what opening the link and the first request cost (the issue's bound: 30 ms);
  beside it, the same request from this process, straight to the server;
* one stream of ``--megabytes`` through the egress side, by name (each request relayed) and
  by address (spliced), against the host downloading it directly;
* ten sessions holding ten connections each at once, every one of them answered.

Numbers are wall-clock medians; the ratios say what the egress side costs over no egress.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bench/http.py would shadow the standard library's http: this folder goes last.
sys.path[0] = str(ROOT)
sys.path.append(str(ROOT / "bench"))

import http.client  # noqa: E402

import anyio  # noqa: E402
import httpx  # noqa: E402
from _common import machine_summary, render_table  # noqa: E402
from tests.network.internet import Internet, start  # noqa: E402

from corral._limits import Limits  # noqa: E402
from corral.engine import Engine  # noqa: E402
from corral.network import Egress, NetworkCeiling  # noqa: E402

_INDEX = 240  # the stand-in's subnet, 10.201.240.0/30: clear of the tests'
_MIB = 1 << 20
_SESSIONS = 10
_CONNECTIONS_EACH = 10
_IMPORT = "import urllib.request"
"""What the request's run imports, without the request: the baseline's code."""
_FETCH = """
import urllib.request
with urllib.request.urlopen("http://{host}/", timeout=10) as reply:
    assert reply.read().startswith(b"hello")
"""
_STREAM = """
import time, urllib.request
started = time.perf_counter()
got = 0
with urllib.request.urlopen("http://{host}/big?size={size}", timeout=60) as reply:
    while chunk := reply.read(1 << 20):
        got += len(chunk)
assert got == {size}, got
print(time.perf_counter() - started)
"""
_MANY = """
import threading, urllib.request
errors = []
def one():
    try:
        with urllib.request.urlopen("http://example.test/", timeout=20) as reply:
            reply.read()
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=one) for _ in range({each})]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(len(errors), errors[:1])
"""


@dataclass
class Found:
    run_ms: float = 0.0
    run_with_link_ms: float = 0.0
    run_with_request_ms: float = 0.0
    direct_request_ms: float = 0.0
    stream_mb_s: dict[str, float] = field(default_factory=dict)
    connections: int = _SESSIONS * _CONNECTIONS_EACH
    errors: int = 0
    many_seconds: float = 0.0
    first_failure: str = ""


def _ceiling(internet: Internet, megabytes: int) -> NetworkCeiling:
    return NetworkCeiling.parse(
        allow=["example.test", f"{internet.address}/32"],
        private_allow=[f"{internet.address}/32"],
        hosts={"example.test": internet.address},
        max_bytes=(megabytes + 64) * _MIB,
        max_connections=2 * _CONNECTIONS_EACH,
    )


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000.0


def _direct_request(address: str) -> float:
    """One request on a fresh connection from this process, as the sandbox's code makes it."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection(address, 80, timeout=10)
    try:
        connection.request("GET", "/", headers={"Host": "example.test"})
        assert connection.getresponse().read().startswith(b"hello")
    finally:
        connection.close()
    return time.perf_counter() - started


def _direct(url: str) -> float:
    started = time.perf_counter()
    with httpx.stream("GET", url, timeout=60) as reply:
        for _chunk in reply.iter_raw(_MIB):
            pass
    return time.perf_counter() - started


async def _timed(engine: Engine, code: str, **options: object) -> float:
    started = time.perf_counter()
    result = await engine.run(code, **options)  # type: ignore[arg-type]
    if result.outcome != "ok":
        raise SystemExit(f"a run failed: {result.outcome}: {result.stderr[-500:]}")
    return time.perf_counter() - started


async def measure(internet: Internet, runs: int, megabytes: int) -> Found:
    ceiling = _ceiling(internet, megabytes)
    names, addresses = ceiling.subset(["example.test"]), ceiling.subset([internet.address])
    limits = Limits(timeout=120)
    size = megabytes * _MIB
    found = Found()
    async with Engine(capacity=2, limits=limits, egress=Egress(ceiling)) as engine:
        for _ in range(5):  # warm both paths
            await _timed(engine, "pass")
            await _timed(engine, _FETCH.format(host="example.test"), network=names)
        plain, linked, networked, direct = [], [], [], []
        fetch = _FETCH.format(host="example.test")
        for _ in range(runs):  # interleaved, so drift hits each alike
            plain.append(await _timed(engine, _IMPORT))
            linked.append(await _timed(engine, _IMPORT, network=names))
            networked.append(await _timed(engine, fetch, network=names))
            direct.append(await anyio.to_thread.run_sync(_direct_request, internet.address))
        found.run_ms = _median_ms(plain)
        found.run_with_link_ms = _median_ms(linked)
        found.run_with_request_ms = _median_ms(networked)
        found.direct_request_ms = _median_ms(direct)

        streams: dict[str, list[float]] = {"by name": [], "by address": [], "direct": []}
        for _ in range(3):
            for label, host, policy in (
                ("by name", "example.test", names),
                ("by address", internet.address, addresses),
            ):
                result = await engine.run(
                    _STREAM.format(host=host, size=size), network=policy, limits=limits
                )
                if result.outcome != "ok":
                    raise SystemExit(f"the stream failed: {result.stderr[-500:]}")
                streams[label].append(float(result.stdout))
            url = f"http://{internet.address}/big?size={size}"
            streams["direct"].append(await anyio.to_thread.run_sync(_direct, url))
        found.stream_mb_s = {
            label: megabytes * _MIB / 1e6 / statistics.median(seconds)
            for label, seconds in streams.items()
        }

        started = time.perf_counter()

        async def session_load() -> None:
            async with await engine.open_session(network=names, limits=limits) as session:
                result = await session.run(_MANY.format(each=_CONNECTIONS_EACH))
            said = result.stdout.split(" ", 1)
            failed = int(said[0]) if result.outcome == "ok" else _CONNECTIONS_EACH
            found.errors += failed
            if failed and not found.first_failure:
                found.first_failure = result.stdout + result.stderr[-300:]

        async with anyio.create_task_group() as group:
            for _ in range(_SESSIONS):
                group.start_soon(session_load)
        found.many_seconds = time.perf_counter() - started
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--megabytes", type=int, default=256)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-bench-net-") as folder:
        internet = start(Path(folder), _INDEX)
        try:
            found = anyio.run(measure, internet, args.runs, args.megabytes)
        finally:
            internet.close()
    streams = found.stream_mb_s
    extra = found.run_with_request_ms - found.run_ms
    link = found.run_with_link_ms - found.run_ms
    rows = [
        ["fresh run, no network (`import urllib.request`)", f"{found.run_ms:.1f} ms", ""],
        ["the same, with a network (its link made)", f"{found.run_with_link_ms:.1f} ms",
         f"+{link:.1f} ms over no network"],
        ["the same, and one HTTP request by name", f"{found.run_with_request_ms:.1f} ms",
         f"+{extra:.1f} ms over no network (bound: +30 ms)"],
        ["that request from the host, direct, own connection",
         f"{found.direct_request_ms:.1f} ms", ""],
    ]  # fmt: skip
    for label, mb_s in streams.items():
        against = "" if label == "direct" else f"{mb_s / streams['direct']:.2f}x of direct"
        rows.append([f"one stream of {args.megabytes} MiB, {label}", f"{mb_s:.0f} MB/s", against])
    rows.append([
        f"{found.connections} connections from {_SESSIONS} sandboxes at once",
        f"{found.errors} errors", f"{found.many_seconds:.1f} s",
    ])  # fmt: skip
    print(machine_summary())
    print(render_table(["what", "median", "against"], rows, markdown=args.markdown))
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(found), indent=2))
    if found.first_failure:
        print("first failure:", found.first_failure)
    met = extra <= 30 and min(streams["by name"], streams["by address"]) >= 200
    met = met and found.errors == 0
    print("targets met" if met else "targets NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

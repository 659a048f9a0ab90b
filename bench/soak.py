"""The long noisy-neighbour soak (issue 8): one key attacks a real ``corral serve`` while
another key's runs must keep succeeding.

The attacker (key "alice", two streams) cycles through a 30,000-folder ``list_files`` walk, a
fork bomb, a memory bomb, stdout and stderr floods, a busy loop and a descriptor hoard, each
guarded to act only inside the sandbox. The victim (key "carol") makes ``--victim-runs`` runs
at ``--concurrency``. Passes when at least 95% of the victim's runs are ``ok`` and the rest
only explicit busy answers, the server is alive, and its descriptors and processes return to
their baseline. The suite has a short version (tests/http/test_noisy_neighbours.py).

    .venv/bin/python bench/soak.py --victim-runs 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# bench/http.py would shadow the standard library's http package, which httpx imports.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import httpx  # noqa: E402

CORRAL = str(Path(sys.executable).with_name("corral"))
ALICE, CAROL = "alice-key", "carol-key"
OPS = "/v1/ops/code_interpreter"
GUARD = """\
import os, socket
if (os.getpid() != 1
        or sorted(p for p in os.listdir('/proc') if p.isdigit()) != ['1']
        or socket.gethostname() != 'corral'):
    raise RuntimeError('refusing to run hostile code outside the corral sandbox')
"""
ATTACKS = {
    "fork bomb": "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "memory bomb": "hoard = []\nwhile True:\n    hoard.append(bytearray(64 * 1024 * 1024))\n",
    "output flood": "while True:\n    print('x' * 10000)\n",
    "stderr flood": "import sys\nwhile True:\n    sys.stderr.write('y' * 10000)\n",
    "busy loop": "while True:\n    pass\n",
    "fd hoard": "fds = []\nwhile True:\n    fds.append(os.open('/', os.O_RDONLY))\n",
}
MANY_DIRS = "import os\nfor i in range(30000):\n    os.makedirs(f'v/{i}')\n"
_SETTLE = 30.0  # seconds for killed workers to be reaped and the pool to refill
_ATTACK_TIMEOUT = 2.0  # seconds per attack run


def _config(folder: Path) -> Path:
    path = folder / "corral.toml"
    keys = "".join(
        f'\n[[server.api_keys]]\nkey = "{key}"\nuser = "{user}"\nroles = ["coder"]\n'
        for key, user in ((ALICE, "alice"), (CAROL, "carol"))
    )
    path.write_text(f'[server]\ndata_dir = "{folder / "data"}"\nlog_level = "WARNING"\n{keys}')
    return path


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _descendants(pid: int) -> int:
    parents: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parents.setdefault(int(stat.read().rsplit(")", 1)[1].split()[1]), []).append(
                    int(entry)
                )
        except (OSError, ValueError, IndexError):
            continue
    count, pending = 0, [pid]
    while pending:
        children = parents.get(pending.pop(), [])
        count += len(children)
        pending += children
    return count


async def _attack(client: httpx.AsyncClient, session: str, names: list[str], stop: asyncio.Event,
                  seen: dict[str, list[str]]) -> None:  # fmt: skip
    while not stop.is_set():
        for name in names:
            body = {"code": GUARD + ATTACKS[name], "timeout": _ATTACK_TIMEOUT}
            response = await client.post("/v1/execute", json=body)
            seen.setdefault(name, []).append(
                response.json()["outcome"] if response.status_code == 200 else "busy"
            )
        walk = await client.post(f"{OPS}/list_files", json={"sessionId": session})
        seen.setdefault("fd walk", []).append(str(walk.status_code))


async def _victim(client: httpx.AsyncClient, runs: int, outcomes: list[str],
                  latencies: list[float]) -> None:  # fmt: skip
    for i in range(runs):
        started = time.perf_counter()
        response = await client.post("/v1/execute", json={"code": f"print({i} * 2)"})
        latencies.append((time.perf_counter() - started) * 1000)
        if response.status_code == 503:
            outcomes.append("busy")
            continue
        result = response.json()
        ok = result["outcome"] == "ok" and result["stdout"] == f"{i * 2}\n"
        outcomes.append("ok" if ok else result["outcome"])


async def _settled(check: Any) -> bool:
    deadline = time.monotonic() + _SETTLE
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.1)
    return False


async def soak(args: argparse.Namespace, url: str, pid: int) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=1) as probe:
        for _ in range(900):  # the zygotes import numpy, pandas and matplotlib first
            try:
                if (await probe.get("/health")).status_code == 200:
                    break
            except httpx.TransportError:
                await asyncio.sleep(0.1)
    async with (
        httpx.AsyncClient(base_url=url, headers={"Api-Key": ALICE}, timeout=120) as alice,
        httpx.AsyncClient(base_url=url, headers={"Api-Key": CAROL}, timeout=120) as carol,
    ):
        base_fds, base_procs = _fds(pid), _descendants(pid)
        session = (await alice.post(f"{OPS}/open_session", json={})).json()["sessionId"]
        await alice.post(f"{OPS}/execute_code", json={"sessionId": session, "code": MANY_DIRS})
        stop, seen = asyncio.Event(), {}
        outcomes: list[str] = []
        latencies: list[float] = []
        names = sorted(ATTACKS)
        attackers = [asyncio.create_task(_attack(alice, session, part, stop, seen))
                     for part in (names[::2], names[1::2])]  # fmt: skip
        started = time.perf_counter()
        per_victim = args.victim_runs // args.concurrency
        await asyncio.gather(
            *(_victim(carol, per_victim, outcomes, latencies) for _ in range(args.concurrency))
        )
        elapsed = time.perf_counter() - started
        stop.set()
        await asyncio.gather(*attackers)
        await alice.post(f"{OPS}/close_session", json={"sessionId": session})
    # With the clients' connections closed, the server should hold what it held before.
    fds_back = await _settled(lambda: _fds(pid) <= base_fds + 4)
    procs_back = await _settled(lambda: _descendants(pid) <= base_procs)
    async with httpx.AsyncClient(base_url=url, timeout=10) as probe:
        healthy = (await probe.get("/health")).status_code == 200
    ok = outcomes.count("ok")
    return {
        "victim_runs": len(outcomes), "victim_ok": ok, "victim_ok_share": ok / len(outcomes),
        "victim_other": sorted(set(outcomes) - {"ok"}),
        "victim_p50_ms": statistics.median(latencies),
        "victim_p90_ms": statistics.quantiles(latencies, n=10)[-1],
        "elapsed_s": elapsed, "attacks": {k: sorted(set(v)) for k, v in seen.items()},
        "attack_runs": sum(len(v) for v in seen.values()),
        "baseline_fds": base_fds, "fds_back": fds_back, "procs_back": procs_back,
        "healthy": healthy,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--victim-runs", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "MISTRAL_"))}
        cmd = [CORRAL, "serve", "--config", str(_config(Path(folder))), "--port", str(port)]
        server = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            report = asyncio.run(soak(args, url, server.pid))
            report["server_alive"] = server.poll() is None
        finally:
            server.terminate()
            server.wait(timeout=60)
    for key, value in report.items():
        print(f"{key:>18}: {value}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    passed = (
        report["victim_ok_share"] >= 0.95 and set(report["victim_other"]) <= {"busy"}
        and report["server_alive"] and report["fds_back"] and report["procs_back"]
        and report["healthy"]
    )  # fmt: skip
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())

"""A real ``corral serve`` in a subprocess on loopback, for tests that need its pid (fds,
signals, rlimits) rather than an in-process app."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx

CORRAL = str(Path(sys.executable).with_name("corral"))
ALICE = "alice-key"
CAROL = "carol-key"
_START_TIMEOUT = 90.0  # seconds for the zygotes to import numpy, pandas and matplotlib
_STOP_TIMEOUT = 30.0  # seconds for the server to exit after SIGTERM (grace + reaping)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def fds(self) -> int:
        """How many descriptors the server holds now."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def alive(self) -> bool:
        return self.process.poll() is None

    def client(self, key: str, timeout: float = 60) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers={"Api-Key": key}, timeout=timeout)

    def descendants(self) -> set[int]:
        """Every live process below the server (zygotes, workers, holders)."""
        return descendants_of(self.pid)

    def stop(self) -> int:
        """SIGTERM, then wait; returns the exit status."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=_STOP_TIMEOUT)


def descendants_of(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found: set[int] = set()
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _toml(data_dir: Path, extra: str) -> str:
    return f"""
[server]
mode = "gateway"
data_dir = "{data_dir}"
log_level = "WARNING"
{extra}
[[server.api_keys]]
key = "{ALICE}"
user = "alice"
roles = ["coder"]

[[server.api_keys]]
key = "{CAROL}"
user = "carol"
roles = ["coder"]
"""


def _limit_nofile(limit: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return apply


@contextlib.contextmanager
def _process(
    tmp_path: Path, server_toml: str, nofile: int | None, capacity: int
) -> Iterator[Server]:
    config = tmp_path / "corral.toml"
    config.write_text(_toml(tmp_path / "data", server_toml))
    port = _free_port()
    log = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "MISTRAL_"))}
    env["CORRAL_CAPACITY"] = str(capacity)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [CORRAL, "serve", "--config", str(config), "--port", str(port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=None if nofile is None else _limit_nofile(nofile),
        )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    try:
        yield server
    finally:
        if server.alive():
            server.process.kill()
            server.process.wait(timeout=_STOP_TIMEOUT)


async def _wait_until_healthy(server: Server) -> None:
    with anyio.fail_after(_START_TIMEOUT):
        async with httpx.AsyncClient(base_url=server.url, timeout=5) as client:
            while True:
                if not server.alive():
                    raise AssertionError("corral serve exited:\n" + server.log.read_text())
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get("/health")).status_code == 200:
                        return
                await anyio.sleep(0.1)  # a condition poll: nothing announces readiness


@contextlib.asynccontextmanager
async def running_server(
    tmp_path: Path, *, server_toml: str = "", nofile: int | None = None, capacity: int = 2
) -> AsyncIterator[Server]:
    """A started ``corral serve`` (gateway mode, keys ALICE and CAROL, both coders)."""
    with _process(tmp_path, server_toml, nofile, capacity) as server:
        await _wait_until_healthy(server)
        yield server

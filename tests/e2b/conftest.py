"""The real E2B SDK against a live ``corral serve`` on loopback.

Each pinned SDK pair gets its own venv, made by the test run from the package registry and
cached under the checkout's ``build/`` folder. The server is the real CLI in gateway mode with
two E2B-shaped keys; the SDK runs ``sdk_scenarios.py`` once per pair and the tests judge what
it saw.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import venv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.network.internet import build_wheel

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "e2b-sdk"
CORRAL = str(Path(sys.executable).with_name("corral"))
SCENARIOS = Path(__file__).with_name("sdk_scenarios.py")
KEY = "e2b_" + "0123456789abcdef" * 2
OTHER_KEY = "e2b_" + "fedcba9876543210" * 2
SDK_PAIRS = [("2.63.0", "2.11.5"), ("2.45.1", "2.9.1")]
"""(e2b, e2b-code-interpreter): add each new release here."""
ONE_SHOT_TIMEOUT_S = 10
"""The test server's ``[engine] timeout`` (sdk_scenarios.py's long runs sleep past it)."""
_INSTALL_TIMEOUT = 600  # seconds for pip to fetch and install one SDK pair
_SCENARIO_TIMEOUT = 600  # seconds for every scenario of one SDK pair


def sdk_python(e2b: str, interpreter: str, *extra: str) -> Path:
    """The python of a venv holding exactly this SDK pair (and ``extra``), made once, cached."""
    target = CACHE / "-".join([f"e2b-{e2b}-ci-{interpreter}", *extra]).replace("==", "-")
    CACHE.mkdir(parents=True, exist_ok=True)
    # Test processes running side by side (pytest-xdist) build each venv once, one at a time.
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _made(target, e2b, interpreter, extra)


def _made(target: Path, e2b: str, interpreter: str, extra: tuple[str, ...]) -> Path:
    python = target / "bin" / "python"
    if (target / ".complete").exists():
        return python
    shutil.rmtree(target, ignore_errors=True)
    venv.create(target, with_pip=True)
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q",
         f"e2b=={e2b}", f"e2b-code-interpreter=={interpreter}", *extra],
        capture_output=True, text=True, timeout=_INSTALL_TIMEOUT, check=False,
    )  # fmt: skip
    if install.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        pytest.skip(f"cannot install e2b=={e2b} from the package registry: {install.stderr[-500:]}")
    (target / ".complete").write_text(f"e2b=={e2b}\ne2b-code-interpreter=={interpreter}\n")
    return python


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Server:
    url: str
    data_dir: Path
    said: list[str] = field(default_factory=list)
    """What the server has written to stderr so far (its log), for a failure to show."""


@contextlib.contextmanager
def serving(data_dir: Path, env: dict[str, str], *args: str) -> Iterator[Server]:
    """``corral serve`` on a loopback port with ``env`` (nothing else of corral's or
    Mistral's from this process's environment) and ``args``, until the block ends."""
    port = _free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "MISTRAL_"))}
    server = subprocess.Popen(
        [CORRAL, "serve", "--host", "127.0.0.1", "--port", str(port), *args],
        env=clean | env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stderr is not None
    said: list[str] = []
    reader: threading.Thread | None = None
    try:
        for line in server.stderr:  # ends when the server does: a hang fails the test timeout
            said.append(line)
            if "Uvicorn running" in line:
                break
        else:
            pytest.fail("corral serve exited: " + "".join(said))
        # Keep reading what it says, so its pipe never fills.
        reader = threading.Thread(target=said.extend, args=(server.stderr,), daemon=True)
        reader.start()
        yield Server(f"http://127.0.0.1:{port}", data_dir, said)
    finally:
        server.terminate()
        server.wait(timeout=30)
        if reader is not None:
            reader.join(timeout=30)  # it ends at the pipe's end, now that the server has
        server.stderr.close()


@pytest.fixture(scope="session")
def corral_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``corral serve`` in gateway mode on a loopback port, with two E2B keys."""
    data_dir = tmp_path_factory.mktemp("e2b-server")
    wheelhouse = tmp_path_factory.mktemp("e2b-wheels")
    wheelhouse.chmod(0o755)  # the sandbox's uid reads it
    build_wheel(wheelhouse).chmod(0o644)
    env = {
        "CORRAL_API_KEYS": f"{KEY}:alice,{OTHER_KEY}:bob",
        "CORRAL_DATA_DIR": str(data_dir),
        # The one-shot default, short so that runs past it (E2B's are bounded by the SDK's
        # timeout instead) cost the suite little time.
        "CORRAL_TIMEOUT": str(ONE_SHOT_TIMEOUT_S),
        "CORRAL_MEMORY_BYTES": str(512 << 20),  # the memory wall scenario stays under 600 MB
        # pip in a sandbox with no network: the wheelhouse only (corral_test_pkg is in it).
        "CORRAL_PACKAGES_INDEX_URL": "",
        "CORRAL_PACKAGES_WHEELHOUSE": str(wheelhouse),
    }
    with serving(data_dir, env) as server:
        yield server


def run_script(
    python: Path, script: Path, *args: str, skip: frozenset[str] | set[str] = frozenset()
) -> Any:
    """What a scenario script run by ``python`` printed last (its JSON line)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "CORRAL_"))}
    env["E2B_SCENARIOS_SKIP"] = ",".join(sorted(skip))
    # A crash of the client says where: Python's fatal errors and glibc's (which would go to a
    # terminal there is none of) both reach the captured stderr.
    env.update(PYTHONFAULTHANDLER="1", LIBC_FATAL_STDERR_="1")
    done = subprocess.run(
        [str(python), str(script), *args],
        capture_output=True, text=True, timeout=_SCENARIO_TIMEOUT, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_scenarios(server: Server, e2b: str, interpreter: str, skip: set[str]) -> dict[str, Any]:
    python = sdk_python(e2b, interpreter)
    args = (server.url, KEY, OTHER_KEY, str(server.data_dir))
    results: dict[str, Any] = run_script(python, SCENARIOS, *args, skip=skip)
    return results

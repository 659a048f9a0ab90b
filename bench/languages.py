"""C++ test cases per second through corral, against a bare exec and SandboxFusion's way.

Run as ``.venv/bin/python bench/languages.py [--cases N] [--concurrency C] [--markdown]``.
One C++ program (read two numbers, print their sum: a case is nothing but its process) and N
cases, in one run on this machine:

* bare exec: the program compiled once on the host (the bench's own source), then one plain
  ``subprocess.run`` of the binary per case with the case on stdin, ``--concurrency`` at a
  time: no isolation at all, the floor of any process-per-case runner;
* ``POST /run_code_batch``: one request of N cases to a ``corral serve`` on loopback (the
  program compiled once in a sandbox, each case forked from a case server and exec'd with
  every wall: namespaces, uid 1000, seccomp, rlimits, its cgroup);
* repeated ``POST /run_code``: one request per case, as verl sends them, ``--concurrency``
  clients (the compile is cached; repeats fork from a case server kept for the program);
* SandboxFusion's way: per case, compile the program and run it (``g++`` then the binary,
  plain subprocesses as SandboxFusion's default ``none`` isolation does), ``--concurrency`` at
  a time, on a tenth of the cases (a compile is a second of CPU).

Each row: cases/s and its ratio to the row it is judged against (batch and bare exec against
bare exec; repeated ``/run_code`` and SandboxFusion's way against SandboxFusion's way).
Loopback only.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/http.py is a sibling: keep this folder from shadowing the standard library's ``http``.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != _HERE] + [str(_HERE)]

import argparse  # noqa: E402
import concurrent.futures  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402

import anyio  # noqa: E402
import httpx  # noqa: E402
from _common import fmt, machine_summary, render_table  # noqa: E402

CORRAL = str(Path(sys.executable).with_name("corral"))
SOURCE = (
    "#include <iostream>\n"
    "int main() { long a, b; std::cin >> a >> b; std::cout << a + b << '\\n'; }\n"
)
FLAGS = ("-std=c++17", "-O2", "-pipe", "-s")  # what corral's cpp compiles with
_START_SECONDS = 60.0  # for the server to answer /health
_POLL = 0.05  # seconds between /health polls while it starts
_REQUEST_SECONDS = 120.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _server(folder: Path) -> Iterator[str]:
    """``corral serve`` on loopback with /run_code open, its own data folder."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "MISTRAL_"))}
    env.update(CORRAL_OPEN_RUN_CODE="true", CORRAL_DATA_DIR=str(folder), CORRAL_TIMEOUT="60")
    process = subprocess.Popen(
        [CORRAL, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        anyio.run(_started, url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


async def _started(url: str, process: subprocess.Popen[bytes]) -> None:
    """Wait (bounded) for the server to answer /health."""
    with anyio.fail_after(_START_SECONDS):
        async with httpx.AsyncClient(timeout=1) as client:
            while process.poll() is None:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{url}/health")).status_code == 200:
                        return
                await anyio.sleep(_POLL)
    raise RuntimeError("corral serve exited before it answered")


def _stdin(i: int) -> str:
    return f"{i} {i + 1}\n"


def _expected(i: int) -> str:
    return f"{2 * i + 1}\n"


def _rate(cases: int, work: Callable[[], int]) -> tuple[float, int]:
    """Cases per second of ``work`` (which returns how many cases came out right)."""
    started = time.perf_counter()
    right = work()
    return cases / (time.perf_counter() - started), right


def _pool(concurrency: int, cases: int, one: Callable[[int], bool]) -> int:
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        return sum(pool.map(one, range(cases)))


def _bare(binary: Path, cases: int, concurrency: int) -> tuple[float, int]:
    def one(i: int) -> bool:
        done = subprocess.run(  # the bench's own program
            [str(binary)], input=_stdin(i), capture_output=True, text=True, check=False
        )
        return done.stdout == _expected(i)

    return _rate(cases, lambda: _pool(concurrency, cases, one))


def _sandboxfusion_way(folder: Path, cases: int, concurrency: int) -> tuple[float, int]:
    gxx = shutil.which("g++")
    assert gxx is not None

    def one(i: int) -> bool:
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            Path(tmp, "main.cpp").write_text(SOURCE)
            subprocess.run(  # the bench's own program
                [gxx, *FLAGS, "main.cpp", "-o", "test"], cwd=tmp, check=True
            )
            done = subprocess.run(
                ["./test"], cwd=tmp, input=_stdin(i), capture_output=True, text=True, check=False
            )
        return done.stdout == _expected(i)

    return _rate(cases, lambda: _pool(concurrency, cases, one))


def _batch(url: str, cases: int) -> tuple[float, int]:
    body = {
        "code": SOURCE,
        "language": "cpp",
        "compile_timeout": 60,
        "cases": [{"stdin": _stdin(i), "expected_stdout": _expected(i)} for i in range(cases)],
    }

    def work() -> int:
        response = httpx.post(f"{url}/run_code_batch", json=body, timeout=_REQUEST_SECONDS)
        return sum(r["passed"] is True for r in response.json()["results"])

    return _rate(cases, work)


def _repeated(url: str, cases: int, concurrency: int) -> tuple[float, int]:
    with httpx.Client(base_url=url, timeout=_REQUEST_SECONDS) as client:

        def one(i: int) -> bool:
            body = {"code": SOURCE, "language": "cpp", "stdin": _stdin(i), "compile_timeout": 60}
            answer = client.post("/run_code", json=body).json()
            return answer["status"] == "Success" and answer["run_result"]["stdout"] == _expected(i)

        return _rate(cases, lambda: _pool(concurrency, cases, one))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if shutil.which("g++") is None:
        raise SystemExit("bench/languages.py needs g++")
    cases, concurrency = args.cases, args.concurrency
    slow_cases = max(4, cases // 10)
    with tempfile.TemporaryDirectory(prefix="corral-bench-langs-") as tmp:
        folder = Path(tmp)
        binary = folder / "add"
        (folder / "add.cpp").write_text(SOURCE)
        subprocess.run(  # the bench's own program
            ["g++", *FLAGS, str(folder / "add.cpp"), "-o", str(binary)], check=True
        )
        rows: dict[str, tuple[float, int, int]] = {}
        with _server(folder / "data") as url:
            _batch(url, 4)  # the compile (cached from here on) and the zygotes' first workers
            _repeated(url, 4, 2)
            for _round in range(2):  # interleaved, so a busy moment of the host hits all
                for name, run, n in (
                    ("bare exec", lambda: _bare(binary, cases, concurrency), cases),
                    ("/run_code_batch", lambda: _batch(url, cases), cases),
                    ("repeated /run_code", lambda: _repeated(url, cases, concurrency), cases),
                    (
                        "SandboxFusion's way",
                        lambda: _sandboxfusion_way(folder, slow_cases, concurrency),
                        slow_cases,
                    ),
                ):
                    rate, right = run()
                    best = rows.get(name)
                    if best is None or rate > best[0]:
                        rows[name] = (rate, right, n)
    bare, sf = rows["bare exec"][0], rows["SandboxFusion's way"][0]
    against = {
        "bare exec": ("bare exec", bare),
        "/run_code_batch": ("bare exec", bare),
        "repeated /run_code": ("SandboxFusion's way", sf),
        "SandboxFusion's way": ("SandboxFusion's way", sf),
    }
    table = [
        [name, fmt(rate, 1), f"{fmt(rate / against[name][1])}x {against[name][0]}", f"{right}/{n}"]
        for name, (rate, right, n) in rows.items()
    ]
    print(machine_summary())
    print(f"C++ a+b, {cases} cases ({slow_cases} for SandboxFusion's way), concurrency "
          f"{concurrency}, best of 2 interleaved rounds")  # fmt: skip
    headers = ["path", "cases/s", "ratio", "right"]
    print(render_table(headers, table, markdown=args.markdown))


if __name__ == "__main__":
    main()

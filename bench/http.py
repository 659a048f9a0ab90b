"""HTTP benchmark (issue 4): corral's HTTP front end against ``Engine.run`` in process.

Run as ``.venv/bin/python bench/http.py [--runs N] [--clients C] [--seconds S] [--markdown]``.
It starts a server process (this script with ``--serve``, see ``_http_server.py``: one
``Engine``, ``create_app`` and uvicorn on 127.0.0.1, an ephemeral port) and is its client:

* sequential latency, pool warm, in interleaved rounds, of ``POST /v1/execute`` (one-shot,
  full result), DIAL's ``execute_code`` without ``sessionId`` (one-shot without files; a
  temporary session with an input file) and with one, and ``/v1/execute`` in a session; each
  is compared with its in-process twin (``Engine.run``, ``Session.run``, open + put + run +
  close) timed inside the server in the same rounds: the overhead is HTTP p50 minus the twin's
  p50, and for ``/v1/execute`` also per request, wall time minus the result's ``elapsed_ms``;
* streaming and the client SDK (issue 9): ``/v1/execute`` with ``"stream": true`` against the
  same call unstreamed (time to the first output line, total; streaming may add at most
  ``TARGET_STREAM_MS`` to p50), and ``corral.client.AsyncClient.run`` against the same request
  sent with plain httpx (the SDK's own cost per call), interleaved;
* a load run: ``--clients`` concurrent clients for ``--seconds`` (issue 4 asks for 200 for 30
  s; the defaults are a quick run), where only explicit busy answers (503/429 with
  ``Retry-After``) are allowed besides 200, and afterwards the server's workers and file
  descriptors must come back to their baseline.

Loopback only. See bench/README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named http.py: keep its folder from shadowing the standard library's ``http``.
_SCRIPT = Path(__file__).resolve()
_HERE = _SCRIPT.parent
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != _HERE] + [str(_HERE)]

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import secrets  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any, BinaryIO  # noqa: E402

import anyio  # noqa: E402
import anyio.abc  # noqa: E402
import httpx  # noqa: E402
from _common import (  # noqa: E402
    Samples,
    children,
    corral_quiet,
    fd_count,
    fmt,
    machine_summary,
    render_table,
    status_kb,
)
from _http_server import (  # noqa: E402
    EXPECTED,
    IN_PROCESS,
    INPUT_BYTES,
    INPUT_PATH,
    PRINT,
    BenchError,
    serve_child,
)
from anyio.streams.buffered import BufferedByteReceiveStream  # noqa: E402

DIAL = "/v1/ops/code_interpreter"
_CHILD_START_TIMEOUT = 180.0  # seconds for the server to start its engine
_IDLE_TIMEOUT = 10.0  # seconds for the pool to refill between sequential requests
_SETTLE_TIMEOUT = 30.0  # seconds for workers and fds to return to baseline after load
_POLL = 0.001  # seconds between readiness polls
_RETRY_CAP = 1.0  # seconds at most a load client honours of a Retry-After
TARGET_OVERHEAD_MS = 3.0
TARGET_STREAM_MS = 0.5  # issue 9: what streaming may add to a short run's p50


# the client process ------------------------------------------------------------------------


@dataclass(slots=True)
class Server:
    process: anyio.abc.Process
    port: int
    pid: int
    zygote: int
    hello: dict[str, Any]
    stderr_path: str

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stderr_tail(self) -> str:
        return _tail(self.stderr_path)

    def counts(self) -> dict[str, int | None]:
        workers = children(self.zygote)
        return {
            "workers": len(workers),
            "server_fds": fd_count(self.pid),
            "zygote_fds": fd_count(self.zygote),
            "server_threads": len(os.listdir(f"/proc/{self.pid}/task")),
            "server_rss_kb": status_kb(self.pid, "VmRSS"),
        }


def _log_file(path: str) -> BinaryIO:
    return open(path, "wb")  # handed to the child, closed by the caller


def _tail(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")[-2000:]
    except OSError:
        return ""


async def start_server(args: argparse.Namespace, workdir: str, key: str) -> Server:
    stderr_path = os.path.join(workdir, "server.stderr")
    argv = [
        sys.executable,
        str(_SCRIPT),
        "--serve",
        "--data-dir",
        os.path.join(workdir, "data"),
        "--key",
        key,
        "--capacity",
        str(args.capacity),
        "--queue-size",
        str(args.queue_size),
        "--runs",
        str(args.runs),
    ]
    stderr = _log_file(stderr_path)
    try:
        process = await anyio.open_process(argv, stdin=subprocess.DEVNULL, stderr=stderr)
    finally:
        stderr.close()
    assert process.stdout is not None
    lines = BufferedByteReceiveStream(process.stdout)
    try:
        with anyio.fail_after(_CHILD_START_TIMEOUT):
            while True:
                try:
                    line = await lines.receive_until(b"\n", 1 << 20)
                except (anyio.EndOfStream, anyio.IncompleteRead):
                    tail = _tail(stderr_path)
                    raise BenchError(
                        f"the server process exited during start-up:\n{tail}"
                    ) from None
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if "error" in message:
                    raise BenchError(str(message["error"]))
                if message.get("ready"):
                    return Server(
                        process,
                        int(message["port"]),
                        int(message["pid"]),
                        int(message["zygote"]),
                        message,
                        stderr_path,
                    )
    except BaseException:
        await stop_server(process)
        raise
    raise AssertionError("unreachable")


async def stop_server(process: anyio.abc.Process) -> int | None:
    """SIGINT (uvicorn's graceful stop), then SIGKILL if it lingers; returns the exit code."""
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            with anyio.move_on_after(15):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
    return process.returncode


async def wait_pool(client: httpx.AsyncClient, server: Server) -> None:
    """Pool full (from /health) and nothing in flight (from /proc)."""
    health: dict[str, Any] = {}
    with anyio.move_on_after(_IDLE_TIMEOUT):
        while True:
            health = (await client.get("/health")).json()
            if (
                health.get("pool_ready", 0) >= server.hello["pool_size"]
                and health.get("running", 1) == 0
                and corral_quiet(server.zygote)
            ):
                return
            await anyio.sleep(_POLL)
    raise BenchError(f"the server's pool did not refill within {_IDLE_TIMEOUT:g} s: {health}")


class RawClient:
    """A minimal keep-alive HTTP/1.1 client: one request in one send, a Content-Length or
    chunked answer. It costs far less CPU per request than httpx (about 1.5 ms on a 2-core
    machine), which would otherwise count as "HTTP overhead" on the server's CPUs."""

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self._port = port
        self._head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._stream: anyio.abc.SocketStream | None = None
        self._reader: BufferedByteReceiveStream | None = None

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        """POST JSON; returns the status and the body text."""
        if self._stream is None:
            self._stream = await anyio.connect_tcp("127.0.0.1", self._port)
            self._reader = BufferedByteReceiveStream(self._stream)
        assert self._reader is not None
        data = json.dumps(body).encode()
        await self._stream.send(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{self._head}"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        head = (await self._reader.receive_until(b"\r\n\r\n", 65536)).decode("latin-1")
        lines = head.split("\r\n")
        status = int(lines[0].split()[1])
        fields = {
            k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
        }
        if "content-length" in fields:
            payload = await self._reader.receive_exactly(int(fields["content-length"]))
        else:  # chunked
            chunks: list[bytes] = []
            while size := int((await self._reader.receive_until(b"\r\n", 64)).split(b";")[0], 16):
                chunks.append(await self._reader.receive_exactly(size))
                await self._reader.receive_exactly(2)
            await self._reader.receive_exactly(2)
            payload = b"".join(chunks)
        if fields.get("connection", "").lower() == "close":
            await self.aclose()
        return status, payload.decode()

    async def post_chunks(self, path: str, body: dict[str, Any]) -> tuple[int, float, str]:
        """POST JSON, read a chunked answer; returns the status, the ms to its first chunk
        (from the send) and the body text."""
        if self._stream is None:
            self._stream = await anyio.connect_tcp("127.0.0.1", self._port)
            self._reader = BufferedByteReceiveStream(self._stream)
        assert self._reader is not None
        data = json.dumps(body).encode()
        started = time.perf_counter()
        await self._stream.send(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{self._head}"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        head = (await self._reader.receive_until(b"\r\n\r\n", 65536)).decode("latin-1")
        status = int(head.split("\r\n")[0].split()[1])
        if "transfer-encoding: chunked" not in head.lower():
            raise BenchError(f"{path}: not a chunked answer: {head[:200]!r}")
        chunks: list[bytes] = []
        first = 0.0
        while size := int((await self._reader.receive_until(b"\r\n", 64)).split(b";")[0], 16):
            chunks.append(await self._reader.receive_exactly(size))
            if len(chunks) == 1:
                first = (time.perf_counter() - started) * 1000.0
            await self._reader.receive_exactly(2)
        await self._reader.receive_exactly(2)
        return status, first, b"".join(chunks).decode()

    async def aclose(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
        self._stream = self._reader = None


@dataclass(slots=True)
class Surface:
    """Issue 9's cases: streamed against unstreamed, the client SDK against plain httpx."""

    plain: Samples = field(default_factory=lambda: Samples("unstreamed"))
    streamed: Samples = field(default_factory=lambda: Samples("streamed"))
    first_line: Samples = field(default_factory=lambda: Samples("first line"))
    httpx_call: Samples = field(default_factory=lambda: Samples("httpx"))
    sdk_call: Samples = field(default_factory=lambda: Samples("sdk"))
    unavailable: str = ""


async def measure_surface(
    client: httpx.AsyncClient, server: Server, runs: int, raw: RawClient, key: str
) -> Surface:
    """Interleaved rounds: unstreamed, streamed (raw client), plain httpx, the SDK."""
    surface = Surface()
    try:
        from corral.client import AsyncClient
    except ImportError as exc:
        surface.unavailable = f"corral.client: {exc}"
        return surface
    body = {"code": PRINT}

    async def plain() -> None:
        started = time.perf_counter()
        status, text = await raw.post("/v1/execute", body)
        surface.plain.add((time.perf_counter() - started) * 1000.0)
        if status != 200 or json.loads(text)["stdout"] != EXPECTED:
            raise BenchError(f"/v1/execute: HTTP {status} {text[:200]!r}")

    async def streamed() -> None:
        started = time.perf_counter()
        status, first, text = await raw.post_chunks("/v1/execute", {**body, "stream": True})
        surface.streamed.add((time.perf_counter() - started) * 1000.0)
        lines = [json.loads(line) for line in text.splitlines() if line]
        if status != 200 or lines[0] != {"type": "stdout", "text": EXPECTED}:
            raise BenchError(f"streamed /v1/execute: HTTP {status} {text[:200]!r}")
        if lines[-1]["type"] != "result":
            raise BenchError(f"streamed /v1/execute ended without a result: {text[-200:]!r}")
        surface.first_line.add(first)

    async def via_httpx() -> None:
        started = time.perf_counter()
        response = await client.post("/v1/execute", json=body)
        if response.status_code != 200:
            raise BenchError(f"httpx /v1/execute: HTTP {response.status_code}")
        _ = response.json()
        surface.httpx_call.add((time.perf_counter() - started) * 1000.0)

    async with AsyncClient(server.base, key) as sdk:

        async def via_sdk() -> None:
            started = time.perf_counter()
            result = await sdk.run(PRINT)
            surface.sdk_call.add((time.perf_counter() - started) * 1000.0)
            if result.stdout != EXPECTED:
                raise BenchError(f"client SDK: unexpected {result}")

        steps = [plain, streamed, via_httpx, via_sdk]
        for step in steps * 3:  # warm every path
            await step()
        for sample in (surface.plain, surface.streamed, surface.first_line):
            sample.values.clear()
        surface.httpx_call.values.clear()
        surface.sdk_call.values.clear()
        for i in range(runs):
            for j in range(len(steps)):
                await wait_pool(client, server)
                await steps[(i + j) % len(steps)]()
    return surface


def surface_report(surface: Surface, md: bool) -> tuple[list[str], dict[str, Any]]:
    """Issue 9's table and targets."""
    if surface.unavailable:
        return [f"Streaming and client SDK: unavailable ({surface.unavailable})", ""], {}
    rows = [
        [
            "POST /v1/execute, unstreamed (raw client)",
            fmt(surface.plain.p50),
            fmt(surface.plain.p90),
        ],
        [
            'same, "stream": true: first output line',
            fmt(surface.first_line.p50),
            fmt(surface.first_line.p90),
        ],
        [
            'same, "stream": true: whole answer',
            fmt(surface.streamed.p50),
            fmt(surface.streamed.p90),
        ],
        [
            "POST /v1/execute with plain httpx",
            fmt(surface.httpx_call.p50),
            fmt(surface.httpx_call.p90),
        ],
        ["corral.client.AsyncClient.run", fmt(surface.sdk_call.p50), fmt(surface.sdk_call.p90)],
    ]
    added = surface.streamed.p50 - surface.plain.p50
    sdk = surface.sdk_call.p50 - surface.httpx_call.p50
    lines = [
        "Streaming and the client SDK (issue 9), sequential, pool warm (ms)",
        render_table(["case", "p50", "p90"], rows, markdown=md),
        "",
        render_table(
            ["target", "measured", "ratio", "goal", "met"],
            [
                [
                    "streaming adds to p50",
                    f"{fmt(surface.streamed.p50)} - {fmt(surface.plain.p50)} = {fmt(added)} ms",
                    f"{added / TARGET_STREAM_MS:.2f}x goal",
                    f"<= {TARGET_STREAM_MS:g} ms",
                    _met(added <= TARGET_STREAM_MS),
                ],
                [
                    "client SDK per call over plain httpx (reported)",
                    f"{fmt(surface.sdk_call.p50)} - {fmt(surface.httpx_call.p50)} = {fmt(sdk)} ms",
                    "-",
                    "-",
                    "-",
                ],
            ],
            markdown=md,
        ),
        "",
    ]
    data = {
        name: getattr(surface, name).as_dict()
        for name in ("plain", "streamed", "first_line", "httpx_call", "sdk_call")
    }
    data.update(stream_added_p50_ms=added, sdk_overhead_p50_ms=sdk)
    return lines, data


@dataclass(slots=True)
class Case:
    key: str
    title: str
    path: str
    body: dict[str, Any]
    twin: str
    """The in-process case this HTTP case is compared with; "" for an in-process case."""
    samples: Samples
    paired: Samples | None = None
    unavailable: str = ""

    @property
    def in_process(self) -> bool:
        return not self.twin


def _sample(case: Case, status: int, text: str) -> tuple[float | None, float | None]:
    """Validate one answer: (in-server ms of an in-process case, the result's elapsed_ms)."""
    if status != 200:
        raise BenchError(f"{case.title}: HTTP {status} {text[:300]!r}")
    data = json.loads(text)
    if case.in_process:
        if not data.get("ok"):
            raise BenchError(f"{case.title}: {data}")
        return float(data["ms"]), None
    if data.get("stdout") != EXPECTED:
        raise BenchError(f"{case.title}: unexpected answer {text[:300]!r}")
    elapsed = data.get("elapsed_ms")
    return None, float(elapsed) if isinstance(elapsed, int | float) else None


async def _stored_input(client: httpx.AsyncClient) -> tuple[str, str]:
    """Put the input file into the caller's bucket; returns (its file URL, a problem)."""
    response = await client.get("/v1/bucket")
    if response.status_code != 200:
        return "", f"GET /v1/bucket: HTTP {response.status_code} {response.text[:200]!r}"
    bucket = str(response.json()["bucket"])
    path = f"bench/{INPUT_PATH}"
    response = await client.put(
        f"/v1/files/{bucket}/{path}", files={"file": (INPUT_PATH, INPUT_BYTES, "text/csv")}
    )
    if response.status_code != 200:
        return "", f"PUT /v1/files: HTTP {response.status_code} {response.text[:200]!r}"
    return f"files/{bucket}/{path}", ""


def _twin(case: str, title: str) -> Case:
    return Case(f"in_process_{case}", title, IN_PROCESS, {"case": case}, "", Samples(title))


async def measure_http(
    client: httpx.AsyncClient,
    server: Server,
    runs: int,
    timer: Callable[[str, dict[str, Any]], Awaitable[tuple[int, str]]],
) -> list[Case]:
    """Interleaved rounds of every case, each started with the pool full and corral idle."""
    session_id = ""
    response = await client.post(f"{DIAL}/open_session", json={})
    session_note = ""
    if response.status_code == 200:
        session_id = str(response.json()["sessionId"])
    else:
        session_note = f"open_session: HTTP {response.status_code} {response.text[:200]!r}"
    input_url, input_note = await _stored_input(client)
    with_input = {"code": PRINT, "inputFiles": [{"sourceUrl": input_url, "targetPath": INPUT_PATH}]}
    cases = [
        _twin("engine_run", "Engine.run in process"),
        _twin("session_run", "Session.run in process"),
        _twin("temporary_session", "open_session + put_file + run + close in process"),
        Case(
            "execute",
            "POST /v1/execute (one-shot)",
            "/v1/execute",
            {"code": PRINT},
            "in_process_engine_run",
            Samples("HTTP"),
            Samples("paired"),
        ),
        Case(
            "dial_oneshot",
            "DIAL execute_code, no sessionId, no files (one-shot)",
            f"{DIAL}/execute_code",
            {"code": PRINT},
            "in_process_engine_run",
            Samples("HTTP"),
        ),
        Case(
            "dial_temp",
            "DIAL execute_code, no sessionId, 1 input file (temporary session)",
            f"{DIAL}/execute_code",
            with_input,
            "in_process_temporary_session",
            Samples("HTTP"),
            unavailable=input_note,
        ),
        Case(
            "dial_session",
            "DIAL execute_code in a session",
            f"{DIAL}/execute_code",
            {"sessionId": session_id, "code": PRINT},
            "in_process_session_run",
            Samples("HTTP"),
            unavailable=session_note,
        ),
        Case(
            "execute_session",
            "POST /v1/execute in a session",
            "/v1/execute",
            {"sessionId": session_id, "code": PRINT},
            "in_process_session_run",
            Samples("HTTP"),
            Samples("paired"),
            unavailable=session_note,
        ),
    ]
    for _ in range(3):  # warm the connection and each route
        for case in cases:
            if not case.unavailable:
                status, text = await timer(case.path, case.body)
                if status != 200 or (case.in_process and "error" in json.loads(text)):
                    case.unavailable = f"HTTP {status} {text[:200]!r}"
    for i in range(runs):
        for j in range(len(cases)):
            case = cases[(i + j) % len(cases)]
            if case.unavailable:
                continue
            await wait_pool(client, server)
            started = time.perf_counter()
            status, text = await timer(case.path, case.body)
            wall = (time.perf_counter() - started) * 1000.0
            in_server, elapsed = _sample(case, status, text)
            case.samples.add(in_server if in_server is not None else wall)
            if case.paired is not None and elapsed is not None:
                case.paired.add(wall - elapsed)
    if session_id:
        await client.post(f"{DIAL}/close_session", json={"sessionId": session_id})
    return cases


@dataclass(slots=True)
class Load:
    clients: int
    seconds: float
    endpoint: str
    statuses: Counter[str] = field(default_factory=Counter)
    busy: int = 0
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    latency: Samples = field(default_factory=lambda: Samples("ok"))
    elapsed: float = 0.0

    def fail(self, text: str) -> None:
        self.error_count += 1
        if len(self.errors) < 5:
            self.errors.append(text)


def _backoff(retry_after: str, stop: float) -> float:
    """Seconds a polite client waits after a busy answer, bounded by the run's end."""
    try:
        wanted = float(retry_after)
    except ValueError:
        wanted = _RETRY_CAP
    return max(0.0, min(_RETRY_CAP, wanted, stop - anyio.current_time()))


async def load_run(server: Server, key: str, args: argparse.Namespace) -> Load:
    load = Load(args.clients, args.seconds, args.load_endpoint)
    timeout = httpx.Timeout(float(server.hello["timeout"]) + 30.0)
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    started = anyio.current_time()
    stop = started + args.seconds
    async with httpx.AsyncClient(
        base_url=server.base, headers={"Api-Key": key}, timeout=timeout, limits=limits
    ) as client:

        async def one_client(index: int) -> None:
            dial = args.load_endpoint == "execute_code" or (
                args.load_endpoint == "mixed" and index % 2
            )
            path = f"{DIAL}/execute_code" if dial else "/v1/execute"
            while anyio.current_time() < stop:
                sent = time.perf_counter()
                try:
                    response = await client.post(path, json={"code": PRINT})
                except httpx.HTTPError as exc:
                    load.statuses[type(exc).__name__] += 1
                    load.fail(f"{path}: {type(exc).__name__}: {exc}")
                    continue
                wall = (time.perf_counter() - sent) * 1000.0
                load.statuses[str(response.status_code)] += 1
                retry = response.headers.get("Retry-After")
                if response.status_code in (429, 503) and retry is not None:
                    load.busy += 1
                    await anyio.sleep(_backoff(retry, stop))
                elif response.status_code != 200:
                    load.fail(f"{path}: HTTP {response.status_code} {response.text[:200]!r}")
                elif response.json().get("stdout") != EXPECTED:
                    load.fail(f"{path}: 200 with {response.text[:200]!r}")
                else:
                    load.latency.add(wall)

        async with anyio.create_task_group() as tg:
            for index in range(args.clients):
                tg.start_soon(one_client, index)
    load.elapsed = anyio.current_time() - started
    return load


async def settle(server: Server, baseline: dict[str, int | None]) -> tuple[dict[str, Any], float]:
    """Wait (bounded) until the server's counts are back to ``baseline``."""
    started = time.perf_counter()
    keys = ("workers", "server_fds", "zygote_fds")
    counts = server.counts()
    with anyio.move_on_after(_SETTLE_TIMEOUT):
        while True:
            if corral_quiet(server.zygote):
                counts = server.counts()
                if all(counts[k] == baseline[k] for k in keys):
                    break
            await anyio.sleep(0.05)
    return counts, time.perf_counter() - started


async def quiet_counts(server: Server) -> dict[str, int | None]:
    """Counts once the server is idle twice in a row, 0.2 s apart (refills done)."""
    with anyio.fail_after(_IDLE_TIMEOUT):
        while True:
            if corral_quiet(server.zygote):
                first = server.counts()
                await anyio.sleep(0.2)
                if corral_quiet(server.zygote) and server.counts() == first:
                    return first
            await anyio.sleep(0.02)


# report ------------------------------------------------------------------------------------


def _met(ok: bool) -> str:
    return "yes" if ok else "no"


def report(
    server: Server,
    cases: list[Case],
    load: Load,
    baseline: dict[str, int | None],
    after: dict[str, Any],
    settle_s: float,
    exit_code: int | None,
    args: argparse.Namespace,
) -> tuple[str, dict[str, Any]]:
    md = args.markdown
    by_key = {case.key: case for case in cases}
    lines = [
        f"corral HTTP benchmark: {machine_summary()}",
        f"runtime: {server.hello['runtime']}",
        f"server: uvicorn on 127.0.0.1:{server.port}, gateway mode, capacity "
        f"{server.hello['capacity']}, pool {server.hello['pool_size']}, queue "
        f"{server.hello['queue_size']}; {args.runs} sequential runs per case, pool warm, "
        f"interleaved, timed with the {args.client} client",
        "",
    ]
    rows: list[list[str]] = []
    targets: list[list[str]] = []
    data_cases: dict[str, Any] = {}
    for case in cases:
        data_cases[case.key] = {
            "title": case.title,
            "unavailable": case.unavailable,
            **case.samples.as_dict(),
            "samples_ms": case.samples.values,
        }
        twin = by_key.get(case.twin)
        if case.unavailable or not case.samples.values:
            rows.append([case.title, "-", "-", "-", f"unavailable: {case.unavailable}"])
            if not case.in_process:
                targets.append(
                    [
                        f"HTTP overhead p50, {case.title}",
                        "-",
                        "-",
                        f"<= {TARGET_OVERHEAD_MS:g} ms",
                        "no (unavailable)",
                    ]
                )
            continue
        if twin is None:
            rows.append(
                [
                    f"{case.title} (timed in the server)",
                    fmt(case.samples.p50),
                    fmt(case.samples.p90),
                    "-",
                    str(len(case.samples.values)),
                ]
            )
            continue
        if twin.unavailable or not twin.samples.values:
            rows.append(
                [
                    case.title,
                    fmt(case.samples.p50),
                    fmt(case.samples.p90),
                    "no in-process reference",
                    str(len(case.samples.values)),
                ]
            )
            targets.append(
                [
                    f"HTTP overhead p50, {case.title}",
                    f"{fmt(case.samples.p50)} ms",
                    "-",
                    f"<= {TARGET_OVERHEAD_MS:g} ms",
                    "unknown (no in-process reference)",
                ]
            )
            continue
        reference = twin.samples.p50
        overhead = case.samples.p50 - reference
        paired = case.paired.p50 if case.paired is not None and case.paired.values else None
        shown = fmt(overhead) + (f" (paired {fmt(paired)})" if paired is not None else "")
        rows.append(
            [
                case.title,
                fmt(case.samples.p50),
                fmt(case.samples.p90),
                shown,
                str(len(case.samples.values)),
            ]
        )
        data_cases[case.key].update(
            in_process_p50_ms=reference, overhead_p50_ms=overhead, paired_overhead_p50_ms=paired
        )
        targets.append(
            [
                f"HTTP overhead p50, {case.title}",
                f"{fmt(case.samples.p50)} - {fmt(reference)} = {fmt(overhead)} ms",
                f"{overhead / TARGET_OVERHEAD_MS:.2f}x goal",
                f"<= {TARGET_OVERHEAD_MS:g} ms",
                _met(overhead <= TARGET_OVERHEAD_MS),
            ]
        )
    lines.append(
        "Latency, sequential, pool warm (ms; overhead = HTTP p50 - in-process p50; "
        "paired = p50 of wall - the result's elapsed_ms)"
    )
    lines.append(render_table(["case", "p50", "p90", "overhead p50", "n"], rows, markdown=md))
    lines.append("")

    ok = load.latency
    back = all(after[k] == baseline[k] for k in ("workers", "server_fds", "zygote_fds"))
    targets.append(
        [
            f"{load.clients} clients x {load.seconds:g} s, only 200 or explicit busy",
            f"{load.error_count} errors, {load.busy} busy, {len(ok.values)} ok",
            "-",
            "0 errors",
            _met(load.error_count == 0),
        ]
    )
    targets.append(
        [
            "workers and fds back to baseline after load",
            f"workers {baseline['workers']} -> {after['workers']}, server fds "
            f"{baseline['server_fds']} -> {after['server_fds']}, zygote fds "
            f"{baseline['zygote_fds']} -> {after['zygote_fds']} ({settle_s:.1f} s)",
            "-",
            "equal",
            _met(back),
        ]
    )
    lines.append("Targets (issue 4)")
    lines.append(render_table(["target", "measured", "ratio", "goal", "met"], targets, markdown=md))
    lines.append("")
    lines.append(
        f"Load: {load.clients} clients, {load.elapsed:.1f} s, endpoint {load.endpoint}; "
        f"statuses {dict(load.statuses)}; {len(ok.values) / max(load.elapsed, 1e-9):.0f} ok/s; "
        f"ok latency p50 {fmt(ok.p50)} ms, p90 {fmt(ok.p90)} ms, "
        f"max {fmt(max(ok.values, default=float('nan')))} ms"
    )
    rss0, rss1 = baseline["server_rss_kb"] or 0, after["server_rss_kb"] or 0
    stopped = {0: "0", -signal.SIGINT: "-2 (uvicorn re-raises SIGINT after a clean stop)"}
    lines.append(
        f"Server RSS {rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB, threads "
        f"{baseline['server_threads']} -> {after['server_threads']}; server exit code "
        f"after SIGINT: {stopped.get(exit_code or 0, str(exit_code))}"
    )
    for error in load.errors:
        lines.append(f"  error: {error}")
    data = {
        "machine": machine_summary(),
        "args": vars(args),
        "server": server.hello,
        "cases": data_cases,
        "load": {
            "clients": load.clients,
            "seconds": load.elapsed,
            "endpoint": load.endpoint,
            "statuses": dict(load.statuses),
            "busy": load.busy,
            "errors": load.error_count,
            "error_examples": load.errors,
            "ok_latency": ok.as_dict(),
        },
        "baseline": baseline,
        "after": after,
        "settle_seconds": settle_s,
        "server_exit_code": exit_code,
    }
    return "\n".join(lines), data


async def client_main(args: argparse.Namespace) -> tuple[str, dict[str, Any], int]:
    try:
        from corral.http import create_app  # noqa: F401 - fail early, with the reason
    except ImportError as exc:
        raise BenchError(
            "corral.http.create_app is not importable yet "
            f"({type(exc).__name__}: {exc}); bench/http.py needs the HTTP front "
            "end of issue 4"
        ) from exc
    key = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="corral-bench-http-") as workdir:
        server = await start_server(args, workdir, key)
        exit_code: int | None = None
        try:
            headers = {"Api-Key": key}
            raw = RawClient(server.port, headers)
            async with httpx.AsyncClient(
                base_url=server.base, headers=headers, timeout=60.0
            ) as client:

                async def via_httpx(path: str, body: dict[str, Any]) -> tuple[int, str]:
                    response = await client.post(path, json=body)
                    return response.status_code, response.text

                timer = raw.post if args.client == "raw" else via_httpx
                try:
                    cases = await measure_http(client, server, args.runs, timer)
                    surface = await measure_surface(client, server, args.runs, raw, key)
                finally:
                    await raw.aclose()
            baseline = await quiet_counts(server)
            load = await load_run(server, key, args)
            after, settle_s = await settle(server, baseline)
        except BaseException:
            tail = server.stderr_tail()
            await stop_server(server.process)
            if tail:
                print(f"server stderr (tail):\n{tail}", file=sys.stderr)
            raise
        exit_code = await stop_server(server.process)
    text, data = report(server, cases, load, baseline, after, settle_s, exit_code, args)
    extra, surface_data = surface_report(surface, args.markdown)
    data["surface"] = surface_data
    head, sep, tail = text.partition("Targets (issue 4)")
    return head + "\n".join(extra) + "\n" + sep + tail, data, 0 if load.error_count == 0 else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=100, help="sequential runs per case, in process and over HTTP"
    )
    parser.add_argument(
        "--clients", type=int, default=50, help="concurrent clients in the load run (issue 4: 200)"
    )
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="length of the load run (issue 4: 30)"
    )
    parser.add_argument(
        "--load-endpoint",
        choices=("execute", "execute_code", "mixed"),
        default="execute",
        help="/v1/execute, DIAL execute_code without sessionId, or half each",
    )
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="client timing the sequential requests: a minimal HTTP/1.1 one "
        "(default) or httpx, whose own CPU adds ~1.5 ms per request",
    )
    parser.add_argument("--capacity", type=int, default=2, help="engine capacity; default 2")
    parser.add_argument(
        "--queue-size",
        type=int,
        default=256,
        help="engine queue; below --clients, busy answers appear",
    )
    parser.add_argument("--json", metavar="PATH", help="also write every sample as JSON")
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.runs, args.clients, args.capacity, args.queue_size) < 1 or args.seconds <= 0:
        parser.error("--runs, --clients, --capacity, --queue-size and --seconds must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        anyio.run(serve_child, args)
        return 0
    try:
        text, data, status = anyio.run(client_main, args)
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 2
    print(text)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(data, out, indent=2)
    return status


if __name__ == "__main__":
    sys.exit(main())

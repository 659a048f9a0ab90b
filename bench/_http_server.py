"""The server process of bench/http.py: one engine, corral's app and uvicorn on loopback.

Started as ``bench/http.py --serve``; it talks to the client process through JSON lines on
stdout. Besides corral's own routes it serves ``/__bench/in_process``, which runs and times the
in-process twin of each HTTP case inside this process. Not part of corral.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import anyio
from _common import corral_quiet

__all__ = [
    "EXPECTED",
    "INPUT_BYTES",
    "INPUT_PATH",
    "IN_PROCESS",
    "PRINT",
    "BenchError",
    "serve_child",
]

PRINT = "print(6*7)"
EXPECTED = "42\n"
INPUT_PATH = "in.txt"  # one small input file makes DIAL's execute_code use a temporary session
INPUT_BYTES = b"a,b\n1,2\n"
IN_PROCESS = "/__bench/in_process"  # added by this server process, not by corral
_IDLE_TIMEOUT = 10.0  # seconds for the pool to fill after start-up
_POLL = 0.001  # seconds between readiness polls


class BenchError(RuntimeError):
    """The benchmark could not run; the message says why."""


def emit(message: dict[str, Any]) -> None:
    """One JSON line on stdout: how the server process talks to the client process."""
    print(json.dumps(message), flush=True)


async def _engine_idle(engine: Any) -> None:
    with anyio.move_on_after(_IDLE_TIMEOUT):
        while True:
            stats = engine.statistics()
            host = engine._zygote  # the zygote; only its pid is read
            if (
                stats.pool_ready >= stats.pool_size
                and stats.running == 0
                and host is not None
                and host.pid is not None
                and corral_quiet(host.pid)
            ):
                return
            await anyio.sleep(_POLL)
    stats = engine.statistics()
    raise BenchError(
        f"the warm pool did not fill within {_IDLE_TIMEOUT:g} s (ready "
        f"{stats.pool_ready} of {stats.pool_size}, running {stats.running})"
    )


class InProcess:
    """The in-process twin of each HTTP case, run and timed inside the server process.

    The client calls it through a bench-only route, in the same interleaved rounds as the HTTP
    cases, so both see the same machine; only the in-server time is reported.
    """

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._session: Any = None
        self._session_error = ""

    async def open(self) -> None:
        try:
            self._session = await self._engine.open_session()
        except Exception as exc:  # noqa: BLE001 - reported as "unavailable" per case
            self._session_error = f"open_session: {type(exc).__name__}: {exc}"

    async def _temporary(self) -> Any:
        temp = await self._engine.open_session()
        try:
            await temp.put_file(INPUT_PATH, INPUT_BYTES)
            return await temp.run(PRINT)
        finally:
            await temp.close()

    async def run(self, case: str) -> dict[str, Any]:
        if case != "engine_run" and self._session is None:
            return {"error": self._session_error}
        started = time.perf_counter()
        try:
            if case == "engine_run":
                result = await self._engine.run(PRINT)
            elif case == "session_run":
                result = await self._session.run(PRINT)
            else:
                result = await self._temporary()
        except Exception as exc:  # noqa: BLE001 - reported as "unavailable" per case
            return {"error": f"{type(exc).__name__}: {exc}"}
        ms = (time.perf_counter() - started) * 1000.0
        ok = result.outcome == "ok" and result.stdout == EXPECTED
        return {"ms": ms, "ok": ok, "detail": f"{result.outcome}: {result.message}"}


async def serve_child(args: argparse.Namespace) -> None:
    try:
        import uvicorn
        from fastapi import Request, Response
        from fastapi.responses import JSONResponse

        from corral._config import ApiKey, Config
        from corral.engine import Engine
        from corral.http import create_app
    except ImportError as exc:
        emit({"error": f"the HTTP front end is not importable: {type(exc).__name__}: {exc}"})
        return
    config = Config(
        mode="gateway",
        data_dir=Path(args.data_dir),
        capacity=args.capacity,
        queue_size=args.queue_size,
        api_keys=(ApiKey(key=args.key, user="bench"),),
        log_level="WARNING",
    )
    try:
        from corral.http._server import engine_options

        options = engine_options(config)
    except ImportError:
        options = {
            "capacity": config.capacity,
            "queue_size": config.queue_size,
            "limits": config.limits(),
            "data_dir": config.data_dir / "sessions",
        }
    async with Engine(**options) as engine:
        try:
            await _engine_idle(engine)
        except BenchError as exc:
            emit({"error": f"in the server process: {exc}"})
            return
        twin = InProcess(engine)
        await twin.open()
        app = create_app(engine, config)

        async def in_process(request: Request) -> Response:
            body = await request.json()
            return JSONResponse(await twin.run(str(body.get("case"))))

        # A plain Starlette route: FastAPI would try to resolve the string annotations.
        app.router.add_route(IN_PROCESS, in_process, methods=["POST"], include_in_schema=False)
        zygote = engine._zygote.pid if engine._zygote is not None else None
        # proto must be IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted connections only
        # then, and without it Nagle holds the body behind the headers for a delayed ACK
        # (~40 ms per response).
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_level="warning",
                lifespan="off",
                server_header=False,
                timeout_keep_alive=config.timeout_keep_alive,
                backlog=4096,
            )
        )
        emit(
            {
                "ready": True,
                "port": listener.getsockname()[1],
                "pid": os.getpid(),
                "zygote": zygote,
                "capacity": engine.capacity,
                "pool_size": engine.statistics().pool_size,
                "runtime": engine.runtime,
                "timeout": config.execution_timeout,
                "queue_size": config.queue_size,
            }
        )
        await server.serve(sockets=[listener])

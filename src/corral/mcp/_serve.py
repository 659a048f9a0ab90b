"""Transports: stdio (one session per process) and streamable HTTP on loopback."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
import uvicorn
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import DEFAULT_SESSION_IDLE_TIMEOUT
from starlette.applications import Starlette
from starlette.types import Message, Receive, Scope, Send

from corral import _fs
from corral._config import Config
from corral.engine import Engine
from corral.mcp._server import CorralServer, build_server
from corral.mcp._session import McpOptions, ToolSetup
from corral.tools import DEFAULT_CODE_INTERPRETER_CONFIG, CodeInterpreterConfig

__all__ = ["create_http_app", "run_mcp", "serve_http", "serve_mcp", "serve_stdio"]

logger = logging.getLogger("corral.mcp")

LOOPBACK = "127.0.0.1"
_HTTP_PATH = "/mcp"
_GRACEFUL_SHUTDOWN = 2  # seconds uvicorn waits for open streams (SSE) before closing them


async def serve_stdio(
    engine: Engine,
    *,
    config: CodeInterpreterConfig = DEFAULT_CODE_INTERPRETER_CONFIG,
    extra_tools: ToolSetup | None = None,
    options: McpOptions | None = None,
) -> None:
    """Serve one MCP session over this process's stdin and stdout until stdin closes.

    While serving, fd 1 points at stderr so stray output cannot corrupt the wire. Processes
    started earlier keep the real stdout: an engine started before this call has its zygote
    on the wire's descriptor, which is why :func:`serve_mcp` claims stdio first.
    """
    server = build_server(engine, config=config, extra_tools=extra_tools, options=options)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


class _ForgetEndedSessions:
    """ASGI wrapper: when a client DELETEs its MCP session, close its invocation at once.

    The session is closed before the DELETE's response starts, so a client that has its
    answer knows the session's interpreter and sources are gone.
    """

    def __init__(self, app: Starlette, server: CorralServer) -> None:
        self._app = app
        self._server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "DELETE":
            await self._app(scope, receive, send)
            return
        key = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"mcp-session-id"), "")

        async def send_after_closing(message: Message) -> None:
            table = self._server.table
            ended = message["type"] == "http.response.start" and message["status"] < 300
            if ended and key and table is not None:
                await table.drop(key)
            await send(message)

        await self._app(scope, receive, send_after_closing)


def create_http_app(
    engine: Engine,
    *,
    config: CodeInterpreterConfig = DEFAULT_CODE_INTERPRETER_CONFIG,
    extra_tools: ToolSetup | None = None,
    session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
    options: McpOptions | None = None,
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The streamable-HTTP ASGI app (``/mcp``), for loopback; run it with its lifespan on.

    DNS-rebinding protection is on (only ``127.0.0.1``/``localhost`` hosts and origins).
    """
    server = build_server(
        engine,
        config=config,
        extra_tools=extra_tools,
        keyed=True,
        idle_timeout=session_idle_timeout,
        options=options,
    )
    app = server.streamable_http_app(
        streamable_http_path=_HTTP_PATH, host=LOOPBACK, session_idle_timeout=session_idle_timeout
    )
    return _ForgetEndedSessions(app, server)


async def serve_http(
    engine: Engine,
    *,
    port: int,
    config: CodeInterpreterConfig = DEFAULT_CODE_INTERPRETER_CONFIG,
    extra_tools: ToolSetup | None = None,
    log_level: str = "warning",
    options: McpOptions | None = None,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve streamable HTTP at ``http://127.0.0.1:<port>/mcp`` until cancelled or signalled.

    Args:
        port: the TCP port; 0 picks a free one, reported through ``task_status``.

    Raises:
        OSError: the port cannot be bound.
    """
    app = create_http_app(engine, config=config, extra_tools=extra_tools, options=options)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((LOOPBACK, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"{LOOPBACK}:{port}: {exc.strerror}") from exc
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level=log_level,
            lifespan="on",
            timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN,
            server_header=False,
        )
    )

    async def run(tg: anyio.abc.TaskGroup) -> None:
        # Shielded, so a cancelled caller still gets uvicorn's shutdown (lifespan exit, closed
        # sockets) instead of an abandoned server; should_exit below starts it.
        with anyio.CancelScope(shield=True):
            try:
                await server.serve(sockets=[sock])
            finally:
                sock.close()
                tg.cancel_scope.cancel()

    bound = sock.getsockname()[1]
    logger.info("corral MCP server on http://%s:%d%s", LOOPBACK, bound, _HTTP_PATH)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run, tg)
        task_status.started(bound)
        try:
            await anyio.sleep_forever()
        finally:
            server.should_exit = True


async def serve_mcp(
    config: Config, *, http_port: int | None = None, extra_tools: ToolSetup | None = None
) -> None:
    """Start an engine from ``config`` and serve MCP: stdio, or HTTP when ``http_port`` is set.

    Bounds come from the ``[code_interpreter]`` table of ``corral.toml`` (``timeout_ms``,
    ``max_code_chars``, ``max_output_chars``, ``max_sources``) and the ``[mcp]`` table
    (``max_calls_per_session``, unset by default: no cap; ``max_embedded_file_bytes``).

    Raises:
        ConfigError: a bad ``[code_interpreter]`` table.
        IsolationError: this host cannot build the sandbox.
    """
    tool_config = CodeInterpreterConfig.from_toml(config.raw_toml)
    options = McpOptions.from_toml(config.raw_toml)
    _fs.make_private_dir(config.data_dir)
    if http_port is not None:
        async with Engine(**config.engine_options()) as engine:
            await serve_http(
                engine,
                port=http_port,
                config=tool_config,
                extra_tools=extra_tools,
                log_level=config.log_level.lower(),
                options=options,
            )
        return
    # Claim stdin/stdout before the engine starts, so the zygote and every worker inherit the
    # diverted descriptors and nothing they print can reach the JSON-RPC stream.
    async with stdio_server() as (read, write), Engine(**config.engine_options()) as engine:
        server = build_server(engine, config=tool_config, extra_tools=extra_tools, options=options)
        await server.run(read, write, server.create_initialization_options())


def run_mcp(
    config: Config, http_port: int | None = None, *, extra_tools: ToolSetup | None = None
) -> None:
    """Blocking form of :func:`serve_mcp`, for ``corral mcp [--http PORT]``.

    Returns when stdin closes (stdio) or on SIGINT/SIGTERM (HTTP); Ctrl-C is a normal way to
    stop a server, so it returns then too. Logs go to stderr: on stdio, stdout is the wire.

    Raises:
        ConfigError: a bad ``[code_interpreter]`` table.
        IsolationError: this host cannot build the sandbox.
    """
    logging.basicConfig(level=config.log_level.upper())
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(lambda: serve_mcp(config, http_port=http_port, extra_tools=extra_tools))

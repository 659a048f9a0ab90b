"""The low-level MCP server: tools/list and tools/call over each session's registry.

The low-level ``Server`` is used because the tool set is dynamic and per session (the
registry's active set, a budget that changes the description); the high-level one wants
tools declared up front. Handlers render nothing themselves: :class:`ToolResult.to_mcp
<corral.tools.ToolResult.to_mcp>` is the wire shape, so PNG displays arrive as image
content and the execution result JSON as ``structuredContent``.
"""

from __future__ import annotations

import base64
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import anyio
import anyio.abc
import anyio.streams.memory
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND

import corral
from corral.engine import Engine
from corral.errors import CorralError
from corral.mcp._session import McpOptions, SessionTable, ToolSetup
from corral.tools import (
    DEFAULT_CODE_INTERPRETER_CONFIG,
    PROGRESS_PHASES,
    SESSION_FILE_URI,
    CodeInterpreterConfig,
    ProgressEvent,
    ToolContext,
    describe_progress,
    export_tools,
    read_session_file,
)

__all__ = ["SERVER_NAME", "CorralServer", "build_server"]

logger = logging.getLogger("corral.mcp")

SERVER_NAME = "corral"
_MAX_READ_BYTES = 64 * 1024 * 1024  # one resources/read; the session's quota bounds files anyway
_PROGRESS_BUFFER = 32  # events a slow client may lag behind; progress is advisory, extra drops
_INSTRUCTIONS = (
    "corral runs Python in fresh, isolated sandboxes. Use code_interpreter for any "
    "calculation or data transformation instead of doing it in prose; register files with "
    "source_add and pass their ids in sourceIds; use code_session when state must persist "
    "between steps. Each MCP session has its own sources (and call budget, when one is set)."
)

Context = ServerRequestContext[SessionTable, Any]


class CorralServer(Server[SessionTable]):
    """The low-level server, advertising ``tools.listChanged`` on every transport.

    The SDK's in-memory and streamable-HTTP drivers build initialization options without
    arguments, so the flag is defaulted here rather than passed by each caller.
    """

    table: SessionTable | None = None
    """The session table of the running lifespan (the HTTP front end drops ended sessions)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


async def _pump_progress(
    session: ServerSession,
    events: anyio.streams.memory.MemoryObjectReceiveStream[dict[str, Any]],
) -> None:
    total = len(PROGRESS_PHASES)
    async with events:
        async for event in events:
            phase = event.get("phase")
            if phase not in PROGRESS_PHASES:
                continue
            # report_progress is a no-op unless the client sent a progress token.
            message = describe_progress(cast(ProgressEvent, event))
            try:
                await session.report_progress(PROGRESS_PHASES.index(phase) + 1, total, message)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                # The client is gone; the call itself ends or is cancelled on its own.
                logger.debug("progress dropped: the connection is closed")


async def _list_tools(
    ctx: Context, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    session = await ctx.lifespan_context.get(ctx)
    declared = export_tools(session.registry.active(), "mcp")
    return types.ListToolsResult(tools=[types.Tool.model_validate(d) for d in declared])


async def _call_tool(ctx: Context, params: types.CallToolRequestParams) -> types.CallToolResult:
    session = await ctx.lifespan_context.get(ctx)
    send, receive = anyio.create_memory_object_stream[dict[str, Any]](_PROGRESS_BUFFER)

    def progress(event: dict[str, Any]) -> None:
        try:
            send.send_nowait(event)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            logger.debug("a progress event was dropped")

    context = ToolContext(invocation=session.invocation, progress=progress)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_pump_progress, ctx.session, receive)
        try:
            result = await session.registry.call(params.name, params.arguments or {}, context)
        finally:
            send.close()  # the pump drains what is left, so progress precedes the result
    return types.CallToolResult.model_validate(result.to_mcp())


async def _read_resource(
    ctx: Context, params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    """A file of this MCP session's code session, by the URI a result linked it with."""
    session = await ctx.lifespan_context.get(ctx)
    uri = str(params.uri)
    if not uri.startswith(SESSION_FILE_URI):
        raise MCPError(code=INVALID_PARAMS, message=f"unknown resource: {uri[:200]}")
    try:
        data, media_type = await read_session_file(
            session.invocation, uri, max_bytes=_MAX_READ_BYTES
        )
    except FileNotFoundError as exc:
        raise MCPError(code=INVALID_PARAMS, message=f"no such file: {uri[:200]}") from exc
    except (OSError, CorralError) as exc:
        raise MCPError(code=INVALID_PARAMS, message=f"cannot read {uri[:200]}: {exc}") from exc
    blob = base64.b64encode(data).decode("ascii")
    return types.ReadResourceResult(
        contents=[types.BlobResourceContents(uri=uri, mime_type=media_type, blob=blob)]
    )


async def _list_resources(
    ctx: Context, params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    # Generated files are announced by the results that made them (resource links), not here.
    return types.ListResourcesResult(resources=[])


async def _listen(
    ctx: Context, params: types.SubscriptionsListenRequestParams
) -> types.SubscriptionsListenResult:
    session = await ctx.lifespan_context.get(ctx)
    return await session.listen(ctx, params)


async def _no_discover(ctx: Context, params: types.RequestParams | None) -> types.DiscoverResult:
    # Over HTTP the 2026-07-28 era has no sessions, and corral's tools live in one; refusing
    # discovery makes SDK clients fall back to the initialize handshake.
    raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data="server/discover")


def build_server(
    engine: Engine,
    *,
    config: CodeInterpreterConfig = DEFAULT_CODE_INTERPRETER_CONFIG,
    extra_tools: ToolSetup | None = None,
    keyed: bool = False,
    idle_timeout: float | None = None,
    options: McpOptions | None = None,
) -> CorralServer:
    """The MCP server over ``engine``: ``code_interpreter``, ``source_add``, ``code_session``.

    Each MCP session is one :class:`~corral.tools.Invocation` with its own registry.

    Args:
        engine: a started engine, shared by every session.
        config: bounds of the code tools, and the per-session call quota.
        extra_tools: awaited once per session to register more tools.
        keyed: one lifespan serves many sessions, told apart by ``Mcp-Session-Id``
            (streamable HTTP); otherwise every lifespan (``Server.run``) is one session.
        idle_timeout: seconds after which an idle keyed session is closed.
        options: the ``[mcp]`` table (a per-session call cap, the embedding size).
    """

    @contextlib.asynccontextmanager
    async def lifespan(_: Server[SessionTable]) -> AsyncIterator[SessionTable]:
        async with anyio.create_task_group() as tg:
            table = SessionTable(
                engine,
                config,
                extra_tools,
                tg,
                keyed=keyed,
                idle_timeout=idle_timeout,
                options=options,
            )
            if keyed:
                tg.start_soon(table.expire_loop)
            server.table = table
            try:
                yield table
            finally:
                server.table = None
                await table.aclose()
                tg.cancel_scope.cancel()

    server = CorralServer(
        SERVER_NAME,
        version=corral.__version__,
        title="corral code interpreter",
        instructions=_INSTRUCTIONS,
        lifespan=lifespan,
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
        on_list_resources=_list_resources,
        on_read_resource=_read_resource,
        on_subscriptions_listen=_listen,
    )
    if keyed:
        server.add_request_handler("server/discover", types.RequestParams, _no_discover)
    return server

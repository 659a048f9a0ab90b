"""MCP sessions: one Invocation, one tool registry and one change notifier each.

stdio and in-memory transports serve one connection per server lifespan, so their table
holds one session. Streamable HTTP shares one lifespan among all clients, so its table is
keyed by the ``Mcp-Session-Id`` header, and a request without one is refused: handing it a
shared session would let one client reach another's sources and quota.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST

from corral._config import table_values
from corral.engine import Engine
from corral.tools import (
    DEFAULT_EMBED_FILE_BYTES,
    CodeInterpreterConfig,
    Invocation,
    ToolRegistry,
    code_session_tool,
    register_code_interpreter,
    source_add_tool,
)

__all__ = ["McpOptions", "McpSession", "SessionTable", "ToolSetup"]

logger = logging.getLogger("corral.mcp")

ToolSetup = Callable[[ToolRegistry, Invocation], Awaitable[object]]
"""Registers more tools into a new session's registry; what it returns is ignored, so
``lambda registry, _: register_mistral_tools(registry, settings, client)`` fits."""


@dataclass(frozen=True, slots=True, kw_only=True)
class McpOptions:
    """The ``[mcp]`` table: what bounds an MCP session as a whole."""

    max_calls_per_session: int | None = None
    """Code-running calls one MCP session may make; None is no cap. ``[code_interpreter]
    max_calls`` bounds one invocation (a chat turn, one HTTP request), and a desktop client's
    MCP session lasts as long as the client, so it is not applied here."""
    embed_file_bytes: int = DEFAULT_EMBED_FILE_BYTES
    """Largest generated file ``code_session`` embeds; larger ones are resource links."""

    @classmethod
    def from_toml(cls, raw: Mapping[str, Any]) -> McpOptions:
        """Read ``[mcp]`` of a parsed ``corral.toml``.

        Raises:
            ConfigError: an unknown key or a value of the wrong type.
        """
        table = table_values(raw, "mcp")
        return cls(
            max_calls_per_session=table.get("max_calls_per_session"),
            embed_file_bytes=table.get("max_embedded_file_bytes", DEFAULT_EMBED_FILE_BYTES),
        )


_SESSION_HEADER = "mcp-session-id"
_SWEEP_INTERVAL = 60.0  # seconds between idle-session sweeps; expiry is coarse on purpose


class McpSession:
    """The state of one MCP session: the invocation it is, and the tools it sees."""

    def __init__(self, key: str | None, invocation: Invocation) -> None:
        self.key = key
        self.invocation = invocation
        self.registry = ToolRegistry()
        self.last_used = anyio.current_time()
        self._bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self._bus)
        """Serves ``subscriptions/listen`` (2026-07-28 era) for this session's changes."""
        self._outbound: ServerSession | None = None
        self._changed = anyio.Event()
        self._scope = anyio.CancelScope()

    @classmethod
    async def open(
        cls,
        key: str | None,
        engine: Engine,
        config: CodeInterpreterConfig,
        setup: ToolSetup | None,
        task_group: anyio.abc.TaskGroup,
        options: McpOptions | None = None,
    ) -> McpSession:
        options = options or McpOptions()
        self = cls(key, Invocation(max_calls=options.max_calls_per_session))
        try:
            register_code_interpreter(self.registry, engine, self.invocation, config=config)
            self.registry.register(source_add_tool())
            tool = code_session_tool(
                engine, config=config, embed_file_bytes=options.embed_file_bytes
            )
            self.registry.register(tool)
            if setup is not None:
                await setup(self.registry, self.invocation)
        except BaseException:
            await self.invocation.aclose()  # whatever setup attached is released
            raise
        # Added last, so the session's initial tool set notifies nobody.
        self.registry.add_listener(self._on_change)
        task_group.start_soon(self._notify_loop)
        return self

    def attach(self, request: ServerRequestContext[Any, Any]) -> None:
        """Remember the connection's outbound channel (for change notifications) and the time."""
        self._outbound = request.session
        self.last_used = anyio.current_time()

    def _on_change(self) -> None:
        self._changed.set()

    async def _notify_loop(self) -> None:
        with self._scope:
            while True:
                await self._changed.wait()
                self._changed = anyio.Event()
                # Handshake era: on the connection's standalone channel. 2026-07-28 era: only
                # on listen streams, which the bus feeds; each era ignores the other's path.
                await self._bus.publish(ToolsListChanged())
                outbound = self._outbound
                if outbound is not None:
                    try:
                        await outbound.send_tool_list_changed()
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        logger.debug("tools/list_changed dropped: the connection is gone")

    async def aclose(self) -> None:
        self._scope.cancel()
        self.listen.close()
        await self.invocation.aclose()


class SessionTable:
    """The MCP sessions of one server lifespan.

    Args:
        keyed: key sessions by the ``Mcp-Session-Id`` header (streamable HTTP); otherwise the
            lifespan is one connection and holds one session.
        idle_timeout: seconds after its last request when a keyed session is closed; match
            the transport's own session timeout.
    """

    def __init__(
        self,
        engine: Engine,
        config: CodeInterpreterConfig,
        setup: ToolSetup | None,
        task_group: anyio.abc.TaskGroup,
        *,
        keyed: bool,
        idle_timeout: float | None = None,
        options: McpOptions | None = None,
    ) -> None:
        self._options = options or McpOptions()
        self._engine = engine
        self._config = config
        self._setup = setup
        self._tg = task_group
        self._keyed = keyed
        self._idle_timeout = idle_timeout
        self._sessions: dict[str | None, McpSession] = {}
        self._locks: dict[str | None, anyio.Lock] = {}

    def _key(self, request: ServerRequestContext[Any, Any]) -> str | None:
        if not self._keyed:
            return None
        http = request.request
        headers = getattr(http, "headers", None)
        key = headers.get(_SESSION_HEADER) if headers is not None else None
        if not isinstance(key, str) or not key:
            raise MCPError(
                code=INVALID_REQUEST,
                message="corral's tools belong to an MCP session: connect with the initialize "
                "handshake (protocol 2025-11-25 or earlier) so the server can assign one",
            )
        return key

    async def get(self, request: ServerRequestContext[Any, Any]) -> McpSession:
        """The session this request belongs to, opened on its first request.

        Raises:
            MCPError: a keyed table got a request outside any MCP session.
        """
        key = self._key(request)
        session = self._sessions.get(key)
        if session is None:
            lock = self._locks.setdefault(key, anyio.Lock())
            async with lock:
                session = self._sessions.get(key)
                if session is None:
                    session = await McpSession.open(
                        key, self._engine, self._config, self._setup, self._tg, self._options
                    )
                    self._sessions[key] = session
        session.attach(request)
        return session

    async def drop(self, key: str) -> None:
        """Close the session ``key`` (its client ended it); unknown keys are ignored."""
        session = self._sessions.pop(key, None)
        self._locks.pop(key, None)
        if session is not None:
            await session.aclose()

    async def expire_loop(self) -> None:
        """Close keyed sessions idle for longer than ``idle_timeout``; runs until cancelled."""
        if self._idle_timeout is None:
            return
        while True:
            await anyio.sleep(min(_SWEEP_INTERVAL, self._idle_timeout))
            cutoff = anyio.current_time() - self._idle_timeout
            for key, session in list(self._sessions.items()):
                if key is not None and session.last_used < cutoff:
                    logger.info("closing MCP session %s after its idle timeout", key[:12])
                    await self.drop(key)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            while self._sessions:
                _, session = self._sessions.popitem()
                await session.aclose()

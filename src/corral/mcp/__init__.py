"""corral's MCP server: ``code_interpreter``, ``source_add`` and ``code_session`` for any
MCP client, over stdio (``corral mcp``) or streamable HTTP on loopback (``--http PORT``).

Above: MCP clients (desktop apps, agent frameworks, the SDK's ``Client``). Below: the public
APIs of corral.tools (registry, invocations, the tools), corral.sources and corral.engine;
never corral.sandbox. One MCP session is one :class:`~corral.tools.Invocation`: its sources,
its call budget and its persistent interpreter are unreachable from any other session.
"""

from corral._public import publish as _publish
from corral.mcp._serve import create_http_app, run_mcp, serve_http, serve_mcp, serve_stdio
from corral.mcp._server import SERVER_NAME, CorralServer, build_server
from corral.mcp._session import McpOptions, ToolSetup

__all__ = [
    "SERVER_NAME",
    "CorralServer",
    "McpOptions",
    "ToolSetup",
    "build_server",
    "create_http_app",
    "run_mcp",
    "serve_http",
    "serve_mcp",
    "serve_stdio",
]

_publish(globals())

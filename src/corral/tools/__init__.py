"""The tool registry, tool results and schema export for every model API corral serves.

Above: corral.mistral and the front ends (HTTP, MCP, CLI, chat), which register tools, call
them and render their results. Below: corral.engine and corral.sources, reached only by the
tools that run code (and their invocations); the registry, results and export know no
engine and treat a tool as a schema plus an async handler. Not provider- or MCP-aware
beyond the declaration shapes of :func:`export_tools`.
"""

from corral._public import publish as _publish
from corral.tools._code_config import DEFAULT_CODE_INTERPRETER_CONFIG, CodeInterpreterConfig
from corral.tools._code_interpreter import (
    CODE_INTERPRETER,
    code_interpreter_tool,
    register_code_interpreter,
)
from corral.tools._code_session import (
    CODE_SESSION,
    DEFAULT_EMBED_FILE_BYTES,
    SESSION_FILE_URI,
    code_session_tool,
    read_session_file,
)
from corral.tools._export import EXPORT_FORMATS, ExportFormat, export_tools
from corral.tools._invocation import DEFAULT_MAX_CALLS, Invocation
from corral.tools._progress import (
    PROGRESS_PHASES,
    ProgressEvent,
    ProgressPhase,
    ProgressReporter,
    ProgressSink,
    describe_progress,
)
from corral.tools._registry import ToolRegistry
from corral.tools._result import (
    BlobResource,
    ContentBlock,
    ImageContent,
    ResourceContent,
    ResourceLinkContent,
    TextContent,
    ToolErrorInfo,
    ToolResult,
)
from corral.tools._source_add import SOURCE_ADD, source_add_tool
from corral.tools._tool import (
    TOOL_NAME_PATTERN,
    Exposure,
    Namespace,
    Tool,
    ToolAnnotations,
    ToolContext,
    ToolHandler,
)

__all__ = [
    "CODE_INTERPRETER",
    "CODE_SESSION",
    "DEFAULT_CODE_INTERPRETER_CONFIG",
    "DEFAULT_EMBED_FILE_BYTES",
    "DEFAULT_MAX_CALLS",
    "EXPORT_FORMATS",
    "PROGRESS_PHASES",
    "SESSION_FILE_URI",
    "SOURCE_ADD",
    "TOOL_NAME_PATTERN",
    "BlobResource",
    "CodeInterpreterConfig",
    "ContentBlock",
    "ExportFormat",
    "Exposure",
    "ImageContent",
    "Invocation",
    "Namespace",
    "ProgressEvent",
    "ProgressPhase",
    "ProgressReporter",
    "ProgressSink",
    "ResourceContent",
    "ResourceLinkContent",
    "TextContent",
    "Tool",
    "ToolAnnotations",
    "ToolContext",
    "ToolErrorInfo",
    "ToolHandler",
    "ToolRegistry",
    "ToolResult",
    "code_interpreter_tool",
    "code_session_tool",
    "describe_progress",
    "export_tools",
    "read_session_file",
    "register_code_interpreter",
    "source_add_tool",
]

_publish(globals())

"""``code_session``: Python in one persistent isolated interpreter per invocation.

Unlike ``code_interpreter``, variables and files survive between calls until ``reset`` or
the end of the invocation (for MCP: of the MCP session). Calls spend the same quota as
``code_interpreter``: both run code, and the budget bounds the run's work, not one tool.
Sources named in ``sourceIds`` are copied into the session's folder under their file names;
files a call creates or changes come back embedded (up to a size) or as resource links that
:func:`read_session_file` serves (MCP ``resources/read``).
"""

from __future__ import annotations

import base64
import logging
import posixpath
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import anyio

from corral._limits import Limits
from corral._mime import guess_media_type
from corral.engine import Engine, ExecutionResult, FileInfo, Outcome, Session
from corral.errors import (
    Busy,
    CorralError,
    FileTooLarge,
    InvalidPath,
    SessionClosed,
    SourceError,
    WorkerError,
)
from corral.tools._code_config import DEFAULT_CODE_INTERPRETER_CONFIG, CodeInterpreterConfig
from corral.tools._invocation import Invocation, admit_call, start_call
from corral.tools._progress import ProgressReporter
from corral.tools._render import CallFacts, render_execution
from corral.tools._result import (
    BlobResource,
    ContentBlock,
    ResourceContent,
    ResourceLinkContent,
    TextContent,
    ToolResult,
)
from corral.tools._tool import Tool, ToolAnnotations, ToolContext

__all__ = [
    "CODE_SESSION",
    "DEFAULT_EMBED_FILE_BYTES",
    "SESSION_FILE_URI",
    "code_session_tool",
    "read_session_file",
]

logger = logging.getLogger("corral.tools")

CODE_SESSION = "code_session"
SESSION_FILE_URI = "corral://session/files/"
"""Prefix of the URI of a file in the invocation's session folder (the path follows, quoted)."""
DEFAULT_EMBED_FILE_BYTES = 1024 * 1024
"""Largest generated file a result carries inline; larger ones are resource links."""
_FILES_RETURNED = 20  # files per result, embedded or linked; the rest are counted in the text
_SESSION_ROOT = "/mnt/data"


@dataclass(slots=True)
class _Slot:
    """The invocation's interpreter, opened on first use."""

    lock: anyio.Lock = field(default_factory=anyio.Lock)
    session: Session | None = None


def _description(config: CodeInterpreterConfig) -> str:
    return (
        "Run Python 3 in this conversation's persistent, isolated interpreter: variables, "
        "imports and files in the working folder (/mnt/data) stay from one call to the next, "
        "like a notebook. Use it for step-by-step exploration; use code_interpreter for "
        "self-contained computations. reset=true discards everything first. No network, no "
        "package installation, no host files. Available: the standard library, numpy, "
        "pandas, matplotlib, openpyxl and corral.numeric.\n"
        f"Limits per call: {config.max_code_chars} characters of code, "
        f"{config.timeout_ms / 1000:g} s including queueing (past it the interpreter restarts: "
        f"variables are lost, files kept), {config.max_output_chars} characters per output "
        "channel. Calls spend the same budget as code_interpreter.\n"
        f"sourceIds (at most {config.max_sources}) copies this run's sources into the working "
        "folder under their file names. Files a call creates or changes come back with its "
        "result: small ones inline, larger ones as links to read."
    )


def _parameters(config: CodeInterpreterConfig) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "summary": {
                "type": "string",
                "description": "One short sentence for the user on what this code does.",
            },
            "code": {"type": "string", "description": "Python 3 source; may be empty with reset."},
            "reset": {
                "type": "boolean",
                "description": "Discard the interpreter's variables and files before running.",
            },
            "sourceIds": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": config.max_sources,
                "description": "Ids of this run's sources to copy into the working folder.",
            },
        },
        "required": ["summary", "code"],
        "additionalProperties": False,
    }


def session_file_uri(path: str) -> str:
    """The URI a result links a session file by."""
    return SESSION_FILE_URI + urllib.parse.quote(path)


def _media_type(path: str) -> str:
    return guess_media_type(path, strict=True)


async def read_session_file(
    invocation: Invocation, uri: str, *, max_bytes: int
) -> tuple[bytes, str]:
    """The bytes and media type of a file in ``invocation``'s code session, by its URI.

    Raises:
        InvalidPath: not a session-file URI, or a path outside the session folder.
        SessionClosed: the invocation has no open code session.
        FileNotFoundError: no such file; FileTooLarge: larger than ``max_bytes``.
    """
    if not uri.startswith(SESSION_FILE_URI):
        raise InvalidPath(f"not a session file URI: {uri[:200]!r}")
    path = urllib.parse.unquote(uri[len(SESSION_FILE_URI) :])
    slot = invocation.state.get(CODE_SESSION)
    if not isinstance(slot, _Slot) or slot.session is None or slot.session.closed:
        raise SessionClosed("this MCP session has no open code session")
    return await slot.session.get_file(path, max_bytes), _media_type(path)


class _Handler:
    def __init__(self, engine: Engine, config: CodeInterpreterConfig, embed_bytes: int) -> None:
        self._engine = engine
        self._config = config
        self._embed_bytes = embed_bytes

    def _slot(self, invocation: Invocation) -> _Slot:
        slot = invocation.state.get(CODE_SESSION)
        if not isinstance(slot, _Slot):
            slot = invocation.state[CODE_SESSION] = _Slot()

            async def close() -> None:
                if slot.session is not None:
                    await slot.session.close()

            invocation.on_close(close)
        return slot

    async def __call__(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        invocation = context.invocation
        if not isinstance(invocation, Invocation):
            return ToolResult.failure(
                "tool_error",
                f"{CODE_SESSION} needs an Invocation in ToolContext.invocation.",
                details={"tool": CODE_SESSION},
            )
        code, summary = arguments.get("code", ""), arguments.get("summary", "")
        ids = arguments.get("sourceIds", [])
        slot = self._slot(invocation)
        notes: list[str] = []
        if arguments.get("reset") and slot.session is not None:
            async with slot.lock:
                old, slot.session = slot.session, None
                if old is not None:
                    await old.close()
            notes.append("The session was reset: variables and files are gone.")
        if not code.strip():
            text = notes[0] if notes else "Nothing to run: code is empty."
            return ToolResult(
                content=(TextContent(type="text", text=text),),
                details={"tool": CODE_SESSION, "reset": bool(notes)},
            )
        reporter = start_call(CODE_SESSION, invocation, context.progress)
        limits = self._config.limits(self._engine.limits)
        refusal = admit_call(invocation, reporter)
        if refusal is not None:
            result = self._refuse(*refusal, code, limits)
        else:
            result = await self._run(invocation, slot, reporter, code, ids, limits, notes)
        reporter.finished(result)
        facts = CallFacts(
            tool=CODE_SESSION,
            call=reporter.call,
            remaining=invocation.remaining,
            max_calls=invocation.max_calls,
            summary=summary,
            code_chars=len(code),
        )
        rendered = render_execution(result, facts)
        if result.restarted:
            notes.append("The interpreter was restarted: variables are lost, files are kept.")
        files = await self._file_blocks(slot, result, notes)
        if not notes and not files:
            return rendered
        first = rendered.content[0]
        assert first["type"] == "text"
        text = first["text"] + ("\n" + "\n".join(notes) if notes else "")
        block = TextContent(type="text", text=text)
        return ToolResult(
            content=(block, *rendered.content[1:], *files),
            structured=rendered.structured,
            details=rendered.details,
            is_error=rendered.is_error,
            error=rendered.error,
        )

    def _refuse(self, outcome: Outcome, message: str, code: str, limits: Limits) -> ExecutionResult:
        logger.info("%s refused a call: %s", CODE_SESSION, outcome)
        evidence = self._engine.evidence(code, (), limits)
        return ExecutionResult(outcome=outcome, message=message, evidence=evidence)

    async def _file_blocks(
        self, slot: _Slot, result: ExecutionResult, notes: list[str]
    ) -> list[ContentBlock]:
        """The files the run created or changed: embedded when small, linked when not."""
        session = slot.session
        if session is None or session.closed or not result.files:
            return []
        blocks: list[ContentBlock] = []
        for info in result.files[:_FILES_RETURNED]:
            block = await self._file_block(session, result, info)
            if block is not None:
                blocks.append(block)
        if len(result.files) > _FILES_RETURNED:
            notes.append(f"{len(result.files) - _FILES_RETURNED} more changed files not returned.")
        return blocks

    async def _file_block(
        self, session: Session, result: ExecutionResult, info: FileInfo
    ) -> ContentBlock | None:
        path = info.path.removeprefix(_SESSION_ROOT + "/").lstrip("/")
        uri, media_type = session_file_uri(path), _media_type(path)
        if info.size <= self._embed_bytes:
            data = result.file_contents.get(info.path)
            if data is None:
                try:
                    data = await session.get_file(path, self._embed_bytes)
                except (OSError, CorralError):
                    data = None  # gone or changed since the run: link it instead
            if data is not None:
                blob = BlobResource(
                    uri=uri, mimeType=media_type, blob=base64.b64encode(data).decode("ascii")
                )
                return ResourceContent(type="resource", resource=blob)
        name = posixpath.basename(path) or path
        return ResourceLinkContent(
            type="resource_link", uri=uri, name=name, mimeType=media_type, size=info.size
        )

    async def _copy_sources(
        self, invocation: Invocation, session: Session, ids: object, notes: list[str]
    ) -> str | None:
        """Copy the named sources into the session folder; the refusal message, if any."""
        if ids in (None, []):
            return None
        if not isinstance(ids, list | tuple):
            return "sourceIds must be a list of ids"
        try:
            sources = invocation.sources.resolve(list(ids), max_sources=self._config.max_sources)
        except SourceError as exc:
            return str(exc)
        for source in sources:
            name = posixpath.basename(source.filename.replace("\\", "/")) or f"{source.id}.txt"
            data = source.original if source.original is not None else source.text
            try:
                await session.put_file(name, data)
            except SessionClosed:
                raise
            except (InvalidPath, FileTooLarge, OSError, CorralError) as exc:
                return f"source {source.id} could not be copied into the session: {exc}"
            notes.append(f"Source {source.id} is {_SESSION_ROOT}/{name}.")
        return None

    async def _run(
        self,
        invocation: Invocation,
        slot: _Slot,
        reporter: ProgressReporter,
        code: str,
        ids: object,
        limits: Limits,
        notes: list[str],
    ) -> ExecutionResult:
        if len(code) > self._config.max_code_chars:
            message = f"code has {len(code)} characters; the limit is {self._config.max_code_chars}"
            return self._refuse("invalid_input", message, code, limits)
        for attempt in range(2):
            async with slot.lock:
                if slot.session is None or slot.session.closed:
                    if slot.session is not None:
                        notes.append("The previous session had expired; its state is gone.")
                    try:
                        slot.session = await self._engine.open_session(
                            limits=limits, tenant=invocation.id
                        )
                    except (Busy, WorkerError) as exc:
                        outcome: Outcome = "busy" if isinstance(exc, Busy) else "worker_error"
                        return self._refuse(outcome, str(exc), code, limits)
                session = slot.session
            try:
                # Again on the second attempt: that one runs in a fresh session.
                problem = await self._copy_sources(invocation, session, ids, notes)
                if problem is not None:
                    return self._refuse("unavailable_source", problem, code, limits)
                return await session.run(
                    code,
                    limits=limits,
                    on_event=reporter.on_run_event,
                    cancel=invocation.cancelled,
                    tenant=invocation.id,
                )
            except SessionClosed:
                # Expired between the check and the run; a second failure is not a race.
                if attempt:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover


def code_session_tool(
    engine: Engine,
    *,
    config: CodeInterpreterConfig = DEFAULT_CODE_INTERPRETER_CONFIG,
    embed_file_bytes: int = DEFAULT_EMBED_FILE_BYTES,
) -> Tool:
    """The ``code_session`` tool: one persistent interpreter per invocation, opened lazily.

    Args:
        embed_file_bytes: generated files up to this size are embedded in the result; larger
            ones are linked (:data:`SESSION_FILE_URI`) and read with :func:`read_session_file`.
    """
    return Tool(
        name=CODE_SESSION,
        description=_description(config),
        parameters=_parameters(config),
        handler=_Handler(engine, config, embed_file_bytes),
        annotations=ToolAnnotations(
            title="Persistent Python session",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=False,
        ),
    )

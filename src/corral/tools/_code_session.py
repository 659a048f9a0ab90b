"""``code_session``: Python in one persistent isolated interpreter per invocation.

Unlike ``code_interpreter``, variables and files survive between calls until ``reset`` or
the end of the invocation (for MCP: of the MCP session). Calls spend the same quota as
``code_interpreter``: both run code, and the budget bounds the run's work, not one tool.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import anyio

from corral._limits import Limits
from corral.engine import Engine, ExecutionResult, Outcome, Session
from corral.errors import Busy, SessionClosed, WorkerError
from corral.tools._code_config import DEFAULT_CODE_INTERPRETER_CONFIG, CodeInterpreterConfig
from corral.tools._invocation import Invocation, admit_call, start_call
from corral.tools._progress import ProgressReporter
from corral.tools._render import CallFacts, render_execution
from corral.tools._result import TextContent, ToolResult
from corral.tools._tool import Tool, ToolAnnotations, ToolContext

__all__ = ["CODE_SESSION", "code_session_tool"]

logger = logging.getLogger("corral.tools")

CODE_SESSION = "code_session"


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
        "channel. Calls spend the same budget as code_interpreter."
    )


_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {
            "type": "string",
            "description": "One short sentence for the user on what this code does.",
        },
        "code": {"type": "string", "description": "Python 3 source; may be empty with reset."},
        "reset": {
            "type": "boolean",
            "description": "Discard the interpreter's variables and files before running code.",
        },
    },
    "required": ["summary", "code"],
    "additionalProperties": False,
}


class _Handler:
    def __init__(self, engine: Engine, config: CodeInterpreterConfig) -> None:
        self._engine = engine
        self._config = config

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
            result = await self._run(invocation, slot, reporter, code, limits, notes)
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
        if not notes:
            return rendered
        first = rendered.content[0]
        assert first["type"] == "text"
        block = TextContent(type="text", text=first["text"] + "\n" + "\n".join(notes))
        return ToolResult(
            content=(block, *rendered.content[1:]),
            structured=rendered.structured,
            details=rendered.details,
            is_error=rendered.is_error,
            error=rendered.error,
        )

    def _refuse(self, outcome: Outcome, message: str, code: str, limits: Limits) -> ExecutionResult:
        logger.info("%s refused a call: %s", CODE_SESSION, outcome)
        evidence = self._engine.evidence(code, (), limits)
        return ExecutionResult(outcome=outcome, message=message, evidence=evidence)

    async def _run(
        self,
        invocation: Invocation,
        slot: _Slot,
        reporter: ProgressReporter,
        code: str,
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
                        slot.session = await self._engine.open_session(limits=limits)
                    except (Busy, WorkerError) as exc:
                        outcome: Outcome = "busy" if isinstance(exc, Busy) else "worker_error"
                        return self._refuse(outcome, str(exc), code, limits)
                session = slot.session
            try:
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
    engine: Engine, *, config: CodeInterpreterConfig = DEFAULT_CODE_INTERPRETER_CONFIG
) -> Tool:
    """The ``code_session`` tool: one persistent interpreter per invocation, opened lazily."""
    return Tool(
        name=CODE_SESSION,
        description=_description(config),
        parameters=_PARAMETERS,
        handler=_Handler(engine, config),
        annotations=ToolAnnotations(
            title="Persistent Python session",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=False,
        ),
    )

"""``code_interpreter``: bounded local computation in a fresh isolated worker per call.

The contract of docs/code-interpreter.md: input exactly ``{summary, code, sourceIds?}``; checks of
quota, code size and source ownership run outside Python, before it starts; accepted sources
are mounted by id; every outcome comes back typed and bounded; progress is metadata only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from corral._limits import Limits
from corral.engine import Engine, ExecutionResult, Input, Outcome
from corral.errors import SourceError
from corral.tools._code_config import DEFAULT_CODE_INTERPRETER_CONFIG, CodeInterpreterConfig
from corral.tools._invocation import Invocation, admit_call, start_call
from corral.tools._progress import ProgressReporter
from corral.tools._registry import ToolRegistry
from corral.tools._render import CallFacts, render_execution
from corral.tools._result import ToolResult
from corral.tools._tool import Tool, ToolAnnotations, ToolContext

# The config lives in _code_config (shared with code_session); it is re-exported here because
# the package imports it from this module.
__all__ = [
    "CODE_INTERPRETER",
    "DEFAULT_CODE_INTERPRETER_CONFIG",
    "CodeInterpreterConfig",
    "code_interpreter_tool",
    "register_code_interpreter",
]

logger = logging.getLogger("corral.tools")

CODE_INTERPRETER = "code_interpreter"


def _description(config: CodeInterpreterConfig, max_calls: int | None) -> str:
    # Stable for the invocation's whole life: what is left of the budget is in each result.
    budget = (
        f"\nBudget: at most {max_calls} calls per run; every call counts, failed ones "
        "included, and each result says how many are left."
        if max_calls is not None
        else ""
    )
    return (
        "Run Python 3 in a fresh, isolated sandbox and return its stdout, stderr, the value of "
        "the last expression and any figures.\n"
        "Use this tool whenever the answer creates or transforms structured or "
        "machine-readable data: calculations, counting, aggregation, sorting, filtering, "
        "deduplication, ranking, parsing, conversions and checks over explicit input. Do not "
        "simulate arithmetic or data processing in prose: run it here and report the result "
        "this tool returns.\n"
        "Every call starts from nothing: no variables, imports or files carry over, so put "
        "everything the code needs in one call. No network, no package installation, no "
        "host files. Available: the standard library, numpy, pandas, matplotlib, openpyxl "
        "and corral.numeric (missing-aware mean/median/sum).\n"
        f"To read a source of this run (an attachment or a read_source result), list its id "
        f"in sourceIds (at most {config.max_sources}); the code then sees input_files "
        "({id: path of its canonical text, /inputs/<id>.txt}) and input_assets ({id: "
        "{'text', 'original', 'media_type'}}; 'original' is the attachment's own bytes or "
        "None; 'text' is empty for files with no text form, such as parquet or images). Pass "
        "ids only, never paths or file names.\n"
        f"Limits per call: {config.max_code_chars} characters of code, "
        f"{config.timeout_ms / 1000:g} s including queueing, {config.max_output_chars} "
        "characters per output channel; cut output is marked and counted."
        f"{budget}"
    )


def _parameters(config: CodeInterpreterConfig) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "summary": {
                "type": "string",
                "description": "One short sentence for the user on what this code computes. "
                "Shown to people; never put code or data in it.",
            },
            "code": {
                "type": "string",
                "description": "Python 3 source. print() goes to stdout; the value of a final "
                "expression is returned as the result.",
            },
            "sourceIds": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": config.max_sources,
                # No uniqueItems: a repeated id is an unavailable source, which the tool
                # reports as such rather than as a schema violation (docs/code-interpreter.md §3).
                "description": "Unique ids of this run's sources to mount read-only.",
            },
        },
        "required": ["summary", "code"],
        "additionalProperties": False,
    }


_ANNOTATIONS = ToolAnnotations(
    title="Code interpreter",
    read_only_hint=True,
    destructive_hint=False,
    idempotent_hint=True,
    open_world_hint=False,
)


class _Handler:
    """The tool's handler: admission, pre-execution checks, the run, the rendering."""

    def __init__(self, engine: Engine, config: CodeInterpreterConfig) -> None:
        self._engine = engine
        self._config = config

    def _refuse(
        self,
        outcome: Outcome,
        message: str,
        code: str,
        limits: Limits,
        inputs: tuple[Input, ...] = (),
    ) -> ExecutionResult:
        logger.info("%s refused a call: %s", CODE_INTERPRETER, outcome)
        evidence = self._engine.evidence(code, inputs, limits)
        return ExecutionResult(outcome=outcome, message=message, evidence=evidence)

    async def __call__(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        invocation = context.invocation
        if not isinstance(invocation, Invocation):
            return ToolResult.failure(
                "tool_error",
                f"{CODE_INTERPRETER} needs an Invocation in ToolContext.invocation; the host "
                "did not provide one.",
                details={"tool": CODE_INTERPRETER},
            )
        code, summary = arguments.get("code"), arguments.get("summary", "")
        ids = arguments.get("sourceIds", [])
        reporter = start_call(CODE_INTERPRETER, invocation, context.progress)
        limits = self._config.limits(self._engine.limits)
        if not isinstance(code, str) or not isinstance(summary, str):
            result = self._refuse("invalid_input", "summary and code must be strings", "", limits)
        elif (refusal := admit_call(invocation, reporter)) is not None:
            result = self._refuse(*refusal, code, limits)
        else:
            result = await self._admitted(invocation, reporter, code, ids, limits)
        reporter.finished(result)
        facts = CallFacts(
            tool=CODE_INTERPRETER,
            call=reporter.call,
            remaining=invocation.remaining,
            max_calls=invocation.max_calls,
            summary=summary if isinstance(summary, str) else "",
            code_chars=len(code) if isinstance(code, str) else 0,
            source_count=reporter.source_count,
        )
        return render_execution(result, facts)

    async def _admitted(
        self,
        invocation: Invocation,
        reporter: ProgressReporter,
        code: str,
        ids: object,
        limits: Limits,
    ) -> ExecutionResult:
        if len(code) > self._config.max_code_chars:
            message = f"code has {len(code)} characters; the limit is {self._config.max_code_chars}"
            return self._refuse("invalid_input", message, code, limits)
        if not isinstance(ids, list | tuple):
            return self._refuse("invalid_input", "sourceIds must be a list of ids", code, limits)
        try:
            # One lookup for ownership, expiry, duplicates and the count: the registry holds
            # only this invocation's ids, so another run's id fails like an invented one.
            sources = invocation.sources.resolve(ids, max_sources=self._config.max_sources)
            inputs = tuple(invocation.sources.to_input(s) for s in sources)
        except SourceError as exc:
            return self._refuse("unavailable_source", str(exc), code, limits)
        reporter.source_count = len(inputs)
        return await self._engine.run(
            code,
            inputs=inputs,
            limits=limits,
            on_event=reporter.on_run_event,
            cancel=invocation.cancelled,
            tenant=invocation.id,  # one agent run (an MCP session): scheduled fairly
        )


def code_interpreter_tool(
    engine: Engine,
    *,
    config: CodeInterpreterConfig = DEFAULT_CODE_INTERPRETER_CONFIG,
    invocation: Invocation | None = None,
) -> Tool:
    """The ``code_interpreter`` tool; calls read their invocation from the ToolContext.

    Args:
        engine: a started engine; every call gets a fresh worker from it.
        config: the tool's bounds.
        invocation: when given, the description states its cap (or none, when it has none)
            instead of ``config.max_calls``.
    """
    max_calls = invocation.max_calls if invocation is not None else config.max_calls
    return Tool(
        name=CODE_INTERPRETER,
        description=_description(config, max_calls),
        parameters=_parameters(config),
        handler=_Handler(engine, config),
        annotations=_ANNOTATIONS,
    )


def register_code_interpreter(
    registry: ToolRegistry,
    engine: Engine,
    invocation: Invocation,
    *,
    config: CodeInterpreterConfig = DEFAULT_CODE_INTERPRETER_CONFIG,
) -> Callable[[], None]:
    """Register ``code_interpreter`` for one invocation.

    Its description stays the same for the invocation's whole life (each result reports the
    budget left), so clients can cache the tool list and are not sent ``list_changed``.

    Returns:
        A function that does nothing, kept for callers of the refreshing version.

    Raises:
        ToolNameTaken: another tool holds the name.
    """
    registry.register(code_interpreter_tool(engine, config=config, invocation=invocation))
    return lambda: None

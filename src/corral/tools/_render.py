"""An ExecutionResult as a tool result: bounded text and images for the model, the result
JSON as structured content, and privacy-filtered details for transcripts and logs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral._mime import BASE64_IMAGE_TYPES, TEXT_PLAIN
from corral.engine import ExecutionResult
from corral.tools._result import ImageContent, TextContent, ToolErrorInfo, ToolResult

__all__ = ["CallFacts", "render_execution"]

_ERROR_MESSAGE_CHARS = 2_000  # an exception message can embed any data; the traceback is in stderr
_DISPLAY_TEXT_CHARS = 4_000  # per non-image display entry (a DataFrame's text, say)
_FILES_LISTED = 10  # file names echoed to the model; the rest are counted
_SUMMARY_CHARS = 200  # the user-visible label kept in details

_HEADLINES: dict[str, str] = {
    "ok": "Python ran to completion.",
    "python_error": "Python raised an exception{error}. The traceback is in stderr; fix the "
    "code and call again.",
    "memory_limit": "Python ran out of memory{error}. Process the data in smaller pieces.",
    "timeout": "The run hit its deadline ({message}) and was stopped; a running worker is "
    "terminated, not asked. This is a runtime outcome, not Python output: any output shown was "
    "printed before the stop.",
    "cancelled": "The run was cancelled by the caller ({message}); a running worker is "
    "terminated. This is a runtime outcome, not Python output.",
    "invalid_input": "The call was rejected before Python started: {message}.",
    "unavailable_source": "The call was rejected before Python started: {message}. Pass only "
    "source ids this run has registered.",
    "quota_exceeded": "The call was rejected before Python started: {message}. Answer with "
    "the results you already have.",
    "busy": "The sandbox queue is full; Python did not start ({message}). Try again shortly.",
    "worker_error": "The sandbox failed; this is not an error in the code ({message}). Retry once.",
}
# The "safe statement" for ``error.message`` (docs/code-interpreter.md §6): hosts may show it
# to people and persist it, so it carries the outcome only, never exception text or output.
_SAFE_STATEMENTS: dict[str, str] = {
    "python_error": "Python executed and returned an exception.",
    "memory_limit": "Python executed and ran out of memory.",
    "timeout": "The run exceeded its deadline; its worker was terminated.",
    "cancelled": "The run was cancelled; its worker was terminated.",
    "invalid_input": "The call's input was rejected before Python started.",
    "unavailable_source": "A source id was not available; Python did not start.",
    "quota_exceeded": "The run's code-call quota is spent; Python did not start.",
    "busy": "The sandbox queue was full; Python did not start.",
    "worker_error": "The sandbox failed before the code finished.",
}
_STOPPED = frozenset({"timeout", "cancelled", "worker_error"})


@dataclass(frozen=True, slots=True, kw_only=True)
class CallFacts:
    """What the tool knows about the call beyond its result."""

    tool: str
    call: int
    """The call's number in its invocation; 0 when it was not admitted."""
    remaining: int | None
    """Calls the invocation may still make; None when it has no cap."""
    max_calls: int | None
    summary: str = ""
    code_chars: int = 0
    source_count: int = 0


def _headline(result: ExecutionResult) -> str:
    error = ""
    if result.error is not None:
        message = result.error.message
        if len(message) > _ERROR_MESSAGE_CHARS:
            cut = len(message) - _ERROR_MESSAGE_CHARS
            message = message[:_ERROR_MESSAGE_CHARS] + f" [... {cut} characters omitted]"
        error = f" ({result.error.type}: {message})" if message else f" ({result.error.type})"
    template = _HEADLINES.get(result.outcome, "The run ended with outcome {outcome}: {message}.")
    return template.format(error=error, message=result.message.rstrip("."), outcome=result.outcome)


def _display(result: ExecutionResult) -> tuple[list[str], list[ImageContent], list[str]]:
    sections: list[str] = []
    images: list[ImageContent] = []
    notes: list[str] = []
    for index, bundle in enumerate(result.display, 1):
        kind = next((t for t in BASE64_IMAGE_TYPES if isinstance(bundle.get(t), str)), None)
        if kind is not None:
            images.append(ImageContent(type="image", data=bundle[kind], mimeType=kind))
            continue
        text = bundle.get(TEXT_PLAIN)
        if isinstance(text, str) and text:
            shown = text[:_DISPLAY_TEXT_CHARS]
            if len(text) > len(shown):
                shown += f"\n[... {len(text) - len(shown)} characters omitted ...]"
            sections.append(f"--- display {index} ---\n{shown.rstrip()}")
        else:
            notes.append(f"display {index} ({', '.join(sorted(bundle))}) is not shown")
    if images:
        notes.append(
            f"{len(images)} image(s) attached ({', '.join(i['mimeType'] for i in images)})"
        )
    return sections, images, notes


def _model_text(
    result: ExecutionResult, facts: CallFacts, sections: list[str], notes: list[str]
) -> str:
    lines = [
        f"outcome: {result.outcome} ({result.status}, {result.elapsed_ms:.0f} ms)",
        _headline(result),
    ]
    partial = " (captured before the stop)" if result.outcome in _STOPPED else ""
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        if text:
            lines.append(f"--- {name}{partial} ---\n{text.rstrip(chr(10))}")
    if result.result:
        lines.append(f"--- result ---\n{result.result.get(TEXT_PLAIN, '')}")
    lines.extend(sections)
    for channel, count in result.omitted.items():
        if count:
            notes.append(
                f"{channel}: {count} characters omitted; the marker shows where, so "
                "the text shown is not complete"
            )
    if result.files:
        listed = ", ".join(f"{f.path} ({f.size} bytes)" for f in result.files[:_FILES_LISTED])
        more = len(result.files) - _FILES_LISTED
        notes.append(
            f"files left in the worker (discarded with it): {listed}"
            + (f" and {more} more" if more > 0 else "")
        )
    if facts.call and facts.max_calls is not None:
        # The budget lives here, not in the tool's description: a description that changed
        # after every call would re-send the tool list and defeat prompt caching.
        notes.append(f"{facts.remaining} of {facts.max_calls} code calls left in this run")
    if notes:
        lines.append("--- notes ---\n" + "\n".join(f"- {n}" for n in notes))
    return "\n".join(lines)


def _details(result: ExecutionResult, facts: CallFacts) -> dict[str, Any]:
    # Persisted: sizes, counts, digests and the closed outcome only. No code, output, error
    # text, source ids or file names; digests identify inputs without disclosing them.
    evidence = result.evidence
    return {
        "tool": facts.tool,
        "summary": facts.summary[:_SUMMARY_CHARS],
        "call": facts.call,
        "outcome": result.outcome,
        "status": result.status,
        "elapsed_ms": round(result.elapsed_ms, 3),
        "queued_ms": round(result.queued_ms, 3),
        "code_chars": facts.code_chars,
        "source_count": facts.source_count,
        "stdout_chars": len(result.stdout),
        "stderr_chars": len(result.stderr),
        "result_chars": len(result.result.get(TEXT_PLAIN, "")) if result.result else 0,
        "omitted": dict(result.omitted),
        "display_count": len(result.display),
        "file_count": len(result.files),
        "remaining_calls": facts.remaining,
        "evidence": None
        if evidence is None
        else {
            "code_sha256": evidence.code_sha256,
            "runtime": evidence.runtime,
            "input_sha256": [i.sha256 for i in evidence.inputs],
            "limits": dict(evidence.limits),
        },
    }


def render_execution(result: ExecutionResult, facts: CallFacts) -> ToolResult:
    """The tool result of one execution (or of a call refused before it).

    ``is_error`` is set for every outcome but ``ok``; ``error.kind`` is the outcome, so hosts
    branch on the same closed set everywhere.
    """
    sections, images, notes = _display(result)
    text = _model_text(result, facts, sections, notes)
    content: tuple[TextContent | ImageContent, ...] = (TextContent(type="text", text=text), *images)
    error = None
    if not result.ok:
        safe = _SAFE_STATEMENTS.get(result.outcome, "The call failed.")
        error = ToolErrorInfo(kind=result.outcome, message=safe)
    return ToolResult(
        content=content,
        structured=result.as_dict(),
        details=_details(result, facts),
        is_error=not result.ok,
        error=error,
    )

"""``mistral_code_interpreter``: Python run by Mistral's hosted interpreter.

The request, payload and outcomes are docs/mistral.md §3; why it is a Conversations call, §8.2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.errors import RemoteUnreadable
from corral.mistral._client import MistralClient
from corral.mistral._conversations import matching_entries, parse_usage, run_conversation
from corral.mistral._failures import fit
from corral.mistral._settings import DEFAULT_OUTPUT_CHARS, MistralSettings
from corral.tools import Namespace, Tool, ToolAnnotations, ToolContext, ToolResult

__all__ = ["MISTRAL_NAMESPACE", "mistral_code_interpreter_tool", "parse_code_interpreter"]

MISTRAL_NAMESPACE = Namespace(
    name="mistral", description="Tools that run on Mistral's hosted API (billed per use)."
)
_TOOL_TYPE = "code_interpreter"
_SKIPPED = (
    "The code interpreter did not run: Mistral skipped the tool execution. "
    "Nothing was executed; retrying may succeed."
)
_EMPTY = "The code interpreter ran but produced no output."
_UNREADABLE = "Mistral returned a code_interpreter result corral could not read."

_DESCRIPTION = (
    "Run Python in Mistral's hosted code interpreter: one stateless call in which a Mistral "
    "model writes and runs code for the task in `prompt` (or runs the code you include). "
    "Returns the code that ran, its output, text results and short-lived signed links to "
    "generated files (plots, CSVs). Nothing persists between calls. Billed per use by "
    "Mistral. This is not corral's local code_interpreter tool."
)
_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "prompt": {
            "type": "string",
            "description": "The task to solve with Python, or the Python code to run.",
        }
    },
    "required": ["prompt"],
    "additionalProperties": False,
}


@dataclass(slots=True)
class _Execution:
    code: str | None
    output: str | None
    chunks: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0


def parse_code_interpreter(
    response: Any, *, model: str, prompt: str, max_chars: int = DEFAULT_OUTPUT_CHARS
) -> ToolResult:
    """Turn a Conversations response into the tool's result (docs/mistral.md §3.3-3.5, §3.7).

    Pure: the same JSON gives the same result. A skip (no execution entry) and an executed
    run with no output are distinct ok results; an unreadable entry fails the whole call.
    """
    base = {"tool": _TOOL_TYPE, "model": model, "prompt": prompt}
    try:
        executions = [_read(entry) for entry in matching_entries(response, (_TOOL_TYPE,))]
    except RemoteUnreadable:
        return ToolResult.failure("unreadable_result", _UNREADABLE, details=base)
    chunks = [chunk for ex in executions for chunk in ex.chunks]
    structured = {
        "skipped": not executions,
        "executions": [_execution_dict(ex) for ex in executions],
        "chunks": chunks,
    }
    details = {
        **base,
        "executed": bool(executions),
        "skipped": not executions,
        "chunkCount": len(chunks),
    }
    if not executions:
        text = _SKIPPED
    else:
        blocks = [_render(ex, i, len(executions), model) for i, ex in enumerate(executions, 1)]
        text = "\n\n".join(([_EMPTY] if not chunks else []) + blocks)
    return ToolResult.ok(
        fit(text, max_chars), structured=structured, details=details, usage=parse_usage(response)
    )


def mistral_code_interpreter_tool(client: MistralClient, settings: MistralSettings) -> Tool:
    """The ``mistral_code_interpreter`` tool, bound to a client and the search model."""

    async def handler(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        prompt = arguments.get("prompt")
        model = settings.search_model
        details = {"tool": _TOOL_TYPE, "model": model, "prompt": prompt}
        if not isinstance(prompt, str) or not prompt.strip():
            return ToolResult.failure(
                "invalid_input", "prompt must be a non-empty string.", details=details
            )
        return await run_conversation(
            client,
            tool_type=_TOOL_TYPE,
            content=prompt,
            model=model,
            details=details,
            parse=lambda r: parse_code_interpreter(
                r, model=model, prompt=prompt, max_chars=settings.max_output_chars
            ),
        )

    return Tool(
        name="mistral_code_interpreter",
        description=_DESCRIPTION,
        parameters=_PARAMETERS,
        handler=handler,
        annotations=ToolAnnotations(
            title="Mistral code interpreter",
            read_only_hint=True,
            destructive_hint=False,
            open_world_hint=True,
        ),
        namespace=MISTRAL_NAMESPACE,
    )


def _read(entry: dict[str, Any]) -> _Execution:
    info = entry.get("info")
    result = info.get("result") if isinstance(info, dict) else None
    if not isinstance(info, dict) or not isinstance(result, list):
        raise RemoteUnreadable("a code_interpreter execution has no result array")
    code, output = info.get("code"), info.get("code_output")
    ex = _Execution(
        code=code if isinstance(code, str) else None,
        output=output if isinstance(output, str) else None,
    )
    for raw in result:
        chunk = _map_chunk(raw)
        if chunk is None:
            ex.dropped += 1
        else:
            ex.chunks.append(chunk)
    return ex


def _map_chunk(raw: object) -> dict[str, Any] | None:
    # Unknown shapes are dropped whole and only counted: serialising them could leak
    # anything (ids, payloads) into the model's context.
    if not isinstance(raw, dict):
        return None
    if raw.get("type") == "text" and isinstance(raw.get("text"), str):
        return {"type": "text", "text": raw["text"]}
    if raw.get("type") == "file_url" and isinstance(raw.get("file_url"), str):
        chunk: dict[str, Any] = {"type": "file_url", "fileUrl": raw["file_url"]}
        for wire, key in (("file_name", "fileName"), ("file_type", "fileType")):
            if isinstance(raw.get(wire), str):
                chunk[key] = raw[wire]
        return chunk
    return None


def _execution_dict(ex: _Execution) -> dict[str, str]:
    data = {}
    if ex.code is not None:
        data["code"] = ex.code
    if ex.output is not None:
        data["codeOutput"] = ex.output
    return data


def _render(ex: _Execution, index: int, total: int, model: str) -> str:
    lines = [f"Mistral code interpreter (model {model}), execution {index} of {total}"]
    if ex.code:
        lines += ["Code:", "```python", ex.code.rstrip("\n"), "```"]
    if ex.output:
        lines += ["Output:", ex.output.rstrip("\n")]
    texts = [c["text"] for c in ex.chunks if c["type"] == "text"]
    if texts:
        lines += ["Result:", "\n".join(texts)]
    files = [c for c in ex.chunks if c["type"] == "file_url"]
    if files:
        lines.append("Files (signed links, short-lived):")
        for f in files:
            kind = f" ({f['fileType']})" if f.get("fileType") else ""
            lines.append(f"- {f.get('fileName', 'file')}{kind}: {f['fileUrl']}")
    if ex.dropped:
        lines.append(f"Note: {ex.dropped} output chunk(s) of an unrecognised type were omitted.")
    return "\n".join(lines)

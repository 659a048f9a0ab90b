"""``corral chat``: a small agent loop on Mistral chat completions over the tool registry."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from corral.errors import CorralError, RemoteUnreadable
from corral.mistral._client import MISSING_KEY_MESSAGE, MistralClient
from corral.mistral._failures import describe_failure
from corral.mistral._filters import filter_chat_completions_tools
from corral.tools import ToolContext, ToolRegistry, ToolResult, export_tools

__all__ = ["DEFAULT_CHAT_MODEL", "ChatSession", "run_chat"]

logger = logging.getLogger("corral.mistral")

DEFAULT_CHAT_MODEL = "mistral-medium-latest"
_MAX_STEPS = 16  # model requests per user turn; a model stuck calling tools stops here
_EXIT_COMMANDS = frozenset({"/exit", "/quit"})

Output = Callable[[str], None]


class ChatSession:
    """One conversation: its message history, its server tools and its warnings.

    The ``tools`` array is rebuilt from the registry before **every** model request, because
    a tool call (``mistral_connector_load``) can change the active set mid-turn.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        client: MistralClient,
        *,
        output: Output,
        model: str = DEFAULT_CHAT_MODEL,
        system: str | None = None,
        server_tools: Sequence[Mapping[str, Any]] = (),
        context: ToolContext | None = None,
        max_steps: int = _MAX_STEPS,
    ) -> None:
        self._registry = registry
        self._client = client
        self._output = output
        self._model = model
        self._server_tools = [dict(entry) for entry in server_tools]
        self._context = context or ToolContext()
        self._max_steps = max_steps
        self._warned: set[str] = set()
        self.messages: list[dict[str, Any]] = []
        if system:
            self.messages.append({"role": "system", "content": system})

    def build_request(self) -> dict[str, Any]:
        """The next chat completions body: history, plus tools through the server-tool filter
        (docs/mistral.md §4.8)."""
        declared = export_tools(self._registry.active(), "mistral")
        tools = filter_chat_completions_tools(
            [*declared, *self._server_tools], self._warn, self._warned
        )
        body: dict[str, Any] = {"model": self._model, "messages": list(self.messages)}
        if tools:
            body["tools"] = tools
        return body

    async def send(self, text: str) -> str | None:
        """Run one user turn to the model's final answer; returns it (None on failure).

        A failed model request rolls the history back to before the turn, so the next
        attempt starts from a consistent conversation.
        """
        start = len(self.messages)
        self.messages.append({"role": "user", "content": text})
        for _ in range(self._max_steps):
            body = self.build_request()
            try:
                message = _read_message(await self._client.chat_completions(body))
            except CorralError as exc:
                del self.messages[start:]
                servers = [t["type"] for t in body.get("tools", []) if t["type"] != "function"]
                if isinstance(exc, RemoteUnreadable):
                    subject = "chat completions"
                else:  # a 1800 names the server tool it rejects; these are the candidates
                    subject = ", ".join(servers) or "unknown"
                _, why = describe_failure(
                    exc, base_url=self._client.base_url, model=self._model, subject=subject
                )
                self._output(f"error: {why}")
                return None
            self.messages.append(message)
            if message["content"]:
                self._output(message["content"])
            calls = message.get("tool_calls", [])
            if not calls:
                return str(message["content"])
            for call in calls:
                self.messages.append(await self._run_tool(call))
        del self.messages[start:]
        self._output(f"error: stopped after {self._max_steps} model requests in one turn")
        return None

    async def _run_tool(self, call: dict[str, Any]) -> dict[str, Any]:
        function = call["function"]
        name, raw = function["name"], function["arguments"]
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except ValueError:
            result = ToolResult.failure(
                "invalid_input", f"The arguments for {name} are not valid JSON."
            )
        else:
            self._output(f"[tool] {name}")
            result = await self._registry.call(name, arguments, self._context)
        if result.is_error and result.error is not None:
            self._output(f"[tool] {name} failed: {result.error['kind']}")
        return {
            "role": "tool",
            "tool_call_id": call["id"],
            "name": name,
            "content": _model_text(result),
        }

    def _warn(self, message: str) -> None:
        logger.warning("%s", message)
        self._output(f"warning: {message}")


async def run_chat(
    registry: ToolRegistry,
    client: MistralClient,
    *,
    input_fn: Callable[[str], Awaitable[str | None]],
    output_fn: Output,
    model: str = DEFAULT_CHAT_MODEL,
    system: str | None = None,
    server_tools: Sequence[Mapping[str, Any]] = (),
    context: ToolContext | None = None,
) -> None:
    """The terminal loop: read a line, run the turn, print; ``None``, /exit or /quit ends it.

    ``/tools`` prints the declared tools. Terminal I/O is injected: ``input_fn(prompt)``
    returns a line or None at end of input, ``output_fn(text)`` prints.
    """
    if not client.has_key:
        output_fn(f"error: {MISSING_KEY_MESSAGE}")
        return
    session = ChatSession(
        registry,
        client,
        output=output_fn,
        model=model,
        system=system,
        server_tools=server_tools,
        context=context,
    )
    while (line := await input_fn("you> ")) is not None:
        line = line.strip()
        if line in _EXIT_COMMANDS:
            return
        if line == "/tools":
            output_fn(", ".join(registry.active_names()) or "(no tools)")
        elif line:
            await session.send(line)


def _read_message(data: Any) -> dict[str, Any]:
    """The assistant message of a completion, normalised; tool-call arguments as JSON text.

    Raises:
        RemoteUnreadable: no ``choices[0].message``, or a malformed tool call.
    """
    choices = data.get("choices") if isinstance(data, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    raw = first.get("message") if isinstance(first, dict) else None
    if not isinstance(raw, dict):
        raise RemoteUnreadable("the chat completion has no choices[0].message")
    content = raw.get("content")
    if isinstance(content, list):  # some models answer in chunks; only text is shown
        content = "".join(
            c["text"] for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)
        )
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content if isinstance(content, str) else "",
    }
    calls = []
    for i, call in enumerate(raw.get("tool_calls") or []):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(function, dict) or not isinstance(name, str):
            raise RemoteUnreadable("the chat completion has a malformed tool call")
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        call_id = call.get("id") if isinstance(call.get("id"), str) else f"call_{i}"
        calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        )
    if calls:
        message["tool_calls"] = calls
    return message


def _model_text(result: ToolResult) -> str:
    parts = [
        b["text"] if b["type"] == "text" else f"[{b['type']} content omitted]"
        for b in result.content
    ]
    if not parts and result.structured is not None:
        parts.append(json.dumps(result.structured))
    return "\n".join(parts)

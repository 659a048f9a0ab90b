"""A fake Mistral API that speaks the wire shapes of docs/mistral.md §7.

One request handler serves both transports: ``httpx.MockTransport`` in process, and a real
``http.server`` on 127.0.0.1 for the loopback tests. It records every request, checks the
headers and the loopback host, and in guard mode answers a Conversations body holding
``messages`` or ``completion_args.tool_choice`` with the live 422.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import httpx

API_KEY = "test-key"
SIGNED_URL = "https://files.example/p.png?sig=SECRET"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass
class Reply:
    """One scripted answer: a JSON body, or raw ``text`` with its content type."""

    status: int = 200
    json: Any = None
    text: str | None = None
    content_type: str = "application/json"


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    json: Any


Script = Reply | Callable[[Any], Reply]


@dataclass
class FakeMistral:
    """Scriptable state of the fake; tests fill the queues and maps, then read ``requests``."""

    guard: bool = True
    conversations: list[Script] = field(default_factory=list)
    chat: list[Script] = field(default_factory=list)
    connectors: list[dict[str, Any]] = field(default_factory=list)
    page_size: int = 100
    list_failures: list[Reply] = field(default_factory=list)
    tools: dict[str, list[Any] | Reply] = field(default_factory=dict)
    calls: dict[tuple[str, str], Script] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, str, bytes]:
        """Answer one request: ``(status, content type, body)``."""
        parts = urlsplit(url)
        if parts.hostname not in LOOPBACK_HOSTS:
            self.violations.append(f"non-loopback host {parts.hostname}")
            raise AssertionError(f"request to a non-loopback host: {parts.hostname}")
        lowered = {k.lower(): v for k, v in headers.items()}
        data = json.loads(body) if body else None
        with self._lock:
            self.requests.append(Recorded(method, parts.path, parse_qs(parts.query), lowered, data))
            if lowered.get("accept") != "application/json":
                self.violations.append(f"{method} {parts.path}: Accept is not application/json")
            if body and lowered.get("content-type") != "application/json":
                self.violations.append(f"{method} {parts.path}: body without JSON content type")
            if lowered.get("authorization") != f"Bearer {API_KEY}":
                reply = Reply(401, {"message": "Unauthorized", "request_id": "r"})
            else:
                reply = self._route(method, parts.path, parse_qs(parts.query), data)
        if reply.text is not None:
            return reply.status, reply.content_type, reply.text.encode()
        return reply.status, "application/json", json.dumps(reply.json).encode()

    def transport(self) -> httpx.MockTransport:
        """This fake as an in-process httpx transport."""

        def handler(request: httpx.Request) -> httpx.Response:
            status, ctype, content = self.handle(
                request.method, str(request.url), request.headers, request.content
            )
            return httpx.Response(status, headers={"content-type": ctype}, content=content)

        return httpx.MockTransport(handler)

    def paths(self) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.requests]

    def bodies(self, path: str) -> list[Any]:
        return [r.json for r in self.requests if r.path == path]

    def _route(self, method: str, path: str, query: dict[str, list[str]], data: Any) -> Reply:
        segments = [unquote(s) for s in path.strip("/").split("/")]
        if (method, path) == ("POST", "/v1/conversations"):
            return self._conversation(data)
        if (method, path) == ("POST", "/v1/chat/completions"):
            return self._next(self.chat, data, "chat")
        if (method, path) == ("GET", "/v1/connectors"):
            return self._list(query)
        if method == "GET" and len(segments) == 4 and segments[:2] == ["v1", "connectors"]:
            if query.get("pretty") != ["false"]:
                self.violations.append("list_tools without pretty=false")
            tools = self.tools.get(segments[2], Reply(404, error_body("Connector not found")))
            return tools if isinstance(tools, Reply) else Reply(200, tools)
        if method == "POST" and len(segments) == 6 and segments[5] == "call":
            if not isinstance(data, dict) or set(data) != {"arguments"}:
                self.violations.append(f"call body is not {{arguments}}: {data!r}")
            script = self.calls.get((segments[2], segments[4]))
            if script is None:
                return Reply(404, error_body("Tool not found"))
            return script(data) if callable(script) else script
        return Reply(404, {"detail": "Not Found"})

    def _conversation(self, data: Any) -> Reply:
        if self.guard and isinstance(data, dict):
            if "messages" in data:
                return Reply(422, EXTRA_FORBIDDEN)
            args = data.get("completion_args")
            if isinstance(args, dict) and "tool_choice" in args:
                return Reply(422, TOOL_CHOICE_422)
        return self._next(self.conversations, data, "conversation")

    def _next(self, queue: list[Script], data: Any, what: str) -> Reply:
        if not queue:
            self.violations.append(f"unscripted {what} request")
            return Reply(500, error_body("no scripted reply"))
        script = queue.pop(0)
        return script(data) if callable(script) else script

    def _list(self, query: dict[str, list[str]]) -> Reply:
        if query.get("fetch_user_data") != ["true"]:
            self.violations.append("connector list without fetch_user_data=true")
        if self.list_failures:
            return self.list_failures.pop(0)
        cursor = query.get("cursor", ["c1"])[0]
        page = int(cursor[1:]) - 1
        items = self.connectors[page * self.page_size : (page + 1) * self.page_size]
        more = (page + 1) * self.page_size < len(self.connectors)
        return Reply(
            200,
            {
                "items": items,
                "pagination": {
                    "page_size": self.page_size,
                    "next_cursor": f"c{page + 2}" if more else None,
                },
            },
        )


def error_body(
    message: Any, *, type: str = "invalid_request_error", code: Any = None
) -> dict[str, Any]:
    return {"object": "error", "message": message, "type": type, "param": None, "code": code}


EXTRA_FORBIDDEN = {
    "object": "error",
    "message": {
        "detail": [
            {
                "type": "extra_forbidden",
                "loc": ["body", "messages"],
                "msg": "Extra inputs are not permitted",
            }
        ]
    },
    "type": "invalid_request_error",
    "param": None,
    "code": None,
}
TOOL_CHOICE_422 = error_body(
    {
        "detail": [
            {
                "type": "literal_error",
                "loc": ["body", "completion_args", "tool_choice"],
                "msg": "Input should be 'auto', 'none' or 'required'",
            }
        ]
    }
)
USAGE = {
    "prompt_tokens": 95,
    "completion_tokens": 209,
    "total_tokens": 399,
    "connector_tokens": 95,
    "connectors": {"code_interpreter": 1},
}


def conversation(outputs: list[Any], usage: Any = USAGE) -> dict[str, Any]:
    body: dict[str, Any] = {
        "object": "conversation.response",
        "conversation_id": "conv_0123",
        "outputs": outputs,
    }
    if usage is not None:
        body["usage"] = usage
    return body


def execution(name: str, info: Any, *, entry_id: str = "tool_exec_1") -> dict[str, Any]:
    entry: dict[str, Any] = {
        "object": "entry",
        "type": "tool.execution",
        "id": entry_id,
        "name": name,
        "arguments": "{}",
    }
    if info is not None:
        entry["info"] = info
    return entry


def message_output(text: str = "Here is what I found.") -> dict[str, Any]:
    return {
        "object": "entry",
        "type": "message.output",
        "id": "msg_1",
        "role": "assistant",
        "content": [
            {"type": "text", "text": text},
            {"type": "tool_reference", "tool": "web_search", "title": "T", "url": SIGNED_URL},
            {"type": "tool_file", "tool": "code_interpreter", "file_id": "f1", "file_name": "x"},
        ],
    }


def completion(
    content: str | list[Any] = "", tool_calls: list[Any] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "cmpl-1",
        "object": "chat.completion",
        "model": "mistral-medium-latest",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def tool_call(name: str, arguments: Any, call_id: str = "abc123def") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {
            "name": name,
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def connector_item(
    cid: str,
    name: str,
    *,
    description: str = "",
    authenticated: bool | None = True,
    supports_mcp: bool | None = True,
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": cid,
        "name": name,
        "title": name.title(),
        "protocol": "mcp",
        "description": description,
        "is_authenticated": authenticated,
    }
    if supports_mcp is not None:
        item["supports_mcp"] = supports_mcp
    return item


def remote_tool(name: str, description: str = "", **extra: Any) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "required": ["query"],
            "properties": {
                "query": {"type": "string", "title": "Query"},
                "folder": {
                    "anyOf": [{"type": "string"}, {"type": "null"}],
                    "default": None,
                    "title": "Folder",
                },
            },
        },
    }
    tool.update(extra)
    return tool


def call_reply(
    content: list[Any], *, is_error: bool | None = False, metadata: bool = True
) -> Reply:
    body: dict[str, Any] = {"content": content}
    if metadata:
        body["metadata"] = {"mcp_meta": {"isError": is_error, "structuredContent": None}}
    return Reply(200, body)

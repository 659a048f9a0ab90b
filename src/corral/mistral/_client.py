"""The one HTTP client for Mistral's API: plain httpx, typed errors, no retries.

What it sends and how it reads the answers: docs/mistral.md §2.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from corral.errors import (
    ConfigError,
    RemoteAuthError,
    RemoteStatusError,
    RemoteTimeout,
    RemoteUnavailable,
    RemoteUnreadable,
)
from corral.mistral._settings import DEFAULT_BASE_URL, MistralSettings, normalize_base_url

__all__ = [
    "MISSING_KEY_MESSAGE",
    "MistralClient",
    "conversation_body",
    "instructions_for",
    "parse_error_body",
]

logger = logging.getLogger("corral.mistral")

MISSING_KEY_MESSAGE = "MISTRAL_API_KEY is not set; Mistral tools are unavailable."
CONVERSATION_TIMEOUT = 120.0  # seconds; what Mistral's own agent allows a web search
CONNECTOR_TIMEOUT = 30.0  # seconds per connector list, tools or call request
_PAGE_SIZE = 100  # connectors per page; the API's maximum
_MAX_PAGES = 50  # a keyset cursor that never ends is a server bug, not 5,000 connectors
_MESSAGE_CHARS = 500  # an extracted error message is capped here (docs/mistral.md §2.1)
_RAW_CHARS = 200  # of a non-JSON error body, only the head is worth showing


_TASKS = {"code_interpreter": "run Python code"}  # every other built-in tool searches the web


def instructions_for(tool_type: str) -> str:
    """The fixed top-level ``instructions``: the only lever that makes the tool run
    (docs/mistral.md §3.2)."""
    task = _TASKS.get(tool_type, "search the web")
    return f"Always use the {tool_type} tool to {task} before answering. Never answer from memory."


def conversation_body(tool_type: str, content: str, model: str) -> dict[str, Any]:
    """The request body of one stateless Conversations call.

    Never ``messages`` (rejected as ``extra_forbidden``) and never ``completion_args``: both
    forcing ``tool_choice`` values are 422-rejected with built-in tools.
    """
    return {
        "model": model,
        "inputs": [{"role": "user", "content": content}],
        "tools": [{"type": tool_type}],
        "instructions": instructions_for(tool_type),
        "stream": False,
        "store": False,
    }


class MistralClient:
    """Async client for the Conversations, connectors and chat completions endpoints.

    Pass ``http`` to inject an ``httpx.AsyncClient`` (tests give it a transport); otherwise
    the client owns one and closes it in :meth:`aclose`. Every method raises the
    ``corral.errors`` ``Remote*`` classes below and never retries, because Conversations
    calls are billed per use.
    """

    def __init__(
        self,
        api_key: str | None,
        base_url: str = DEFAULT_BASE_URL,
        *,
        http: httpx.AsyncClient | None = None,
        conversation_timeout: float = CONVERSATION_TIMEOUT,
        connector_timeout: float = CONNECTOR_TIMEOUT,
    ) -> None:
        self._api_key = api_key or None
        self.base_url = normalize_base_url(base_url)
        self._http = http if http is not None else httpx.AsyncClient()
        self._owns_http = http is None
        self._conversation_timeout = conversation_timeout
        self._connector_timeout = connector_timeout

    @classmethod
    def from_settings(
        cls, settings: MistralSettings, *, http: httpx.AsyncClient | None = None
    ) -> MistralClient:
        """A client for ``settings.api_key`` and ``settings.base_url``."""
        return cls(settings.api_key, settings.base_url, http=http)

    @property
    def has_key(self) -> bool:
        """Whether an API key is configured; without one no request is ever sent."""
        return self._api_key is not None

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> MistralClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def create_conversation(self, tool_type: str, content: str, model: str) -> Any:
        """One stateless ``POST /v1/conversations`` with one built-in tool (docs/mistral.md §3.2).

        Returns the decoded JSON body, whatever its shape; the tools parse it defensively.

        Raises:
            ConfigError: no API key. RemoteStatusError (RemoteAuthError for 401/403) on an
            error status; RemoteUnavailable (RemoteTimeout) when Mistral cannot be reached;
            RemoteUnreadable when a 200 body is not JSON.
        """
        body = conversation_body(tool_type, content, model)
        data = await self._request(
            "POST", "/v1/conversations", json_body=body, timeout_s=self._conversation_timeout
        )
        outputs = data.get("outputs") if isinstance(data, dict) else None
        if isinstance(outputs, list):
            types = Counter(
                str(e.get("type"))[:40] if isinstance(e, dict) else "?" for e in outputs
            )
            logger.info("conversation outputs: %s", dict(types))
        return data

    async def chat_completions(self, body: Mapping[str, Any]) -> Any:
        """``POST /v1/chat/completions``; raises as :meth:`create_conversation`."""
        return await self._request(
            "POST", "/v1/chat/completions", json_body=body, timeout_s=self._conversation_timeout
        )

    async def list_connectors(self) -> list[Any]:
        """Every connector item, following the keyset cursor across pages.

        Raises:
            RemoteUnreadable: a page is not ``{"items": [...]}``, or the cursor repeats or
            runs past 50 pages. Otherwise as :meth:`create_conversation`.
        """
        items: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(_MAX_PAGES):
            params = {"fetch_user_data": "true", "page_size": str(_PAGE_SIZE)}
            if cursor is not None:
                params["cursor"] = cursor
            page = await self._request(
                "GET", "/v1/connectors", params=params, timeout_s=self._connector_timeout
            )
            if not isinstance(page, dict) or not isinstance(page.get("items"), list):
                raise RemoteUnreadable("the connector list page has no items array")
            items.extend(page["items"])
            pagination = page.get("pagination")
            nxt = pagination.get("next_cursor") if isinstance(pagination, dict) else None
            if not isinstance(nxt, str) or not nxt:
                return items
            if nxt in seen:
                raise RemoteUnreadable("the connector list repeated a pagination cursor")
            seen.add(nxt)
            cursor = nxt
        raise RemoteUnreadable(f"the connector list did not end within {_MAX_PAGES} pages")

    async def list_tools(self, connector_id: str) -> list[Any]:
        """The connector's MCP tools in raw mode (real JSON Schemas).

        Raises:
            RemoteAuthError: the connector is not authenticated (401). Otherwise as
            :meth:`list_connectors`.
        """
        path = f"/v1/connectors/{quote(connector_id, safe='')}/tools"
        data = await self._request(
            "GET", path, params={"pretty": "false"}, timeout_s=self._connector_timeout
        )
        if isinstance(data, dict):
            # Not documented, but cheap to accept should the bare array ever get a wrapper.
            data = data.get("items", data.get("tools"))
        if not isinstance(data, list):
            raise RemoteUnreadable("the connector tools list is not an array")
        return data

    async def call_tool(
        self, connector_id: str, tool_name: str, arguments: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Call a connector tool by its remote name; returns the decoded response object.

        Raises:
            RemoteUnreadable: the body is not a JSON object. Otherwise as
            :meth:`create_conversation`.
        """
        path = (
            f"/v1/connectors/{quote(connector_id, safe='')}/tools/{quote(tool_name, safe='')}/call"
        )
        data = await self._request(
            "POST",
            path,
            json_body={"arguments": dict(arguments)},
            timeout_s=self._connector_timeout,
        )
        if not isinstance(data, dict):
            raise RemoteUnreadable("the connector tool result is not a JSON object")
        return data

    async def _request(
        self,
        method: str,
        path: str,
        *,
        timeout_s: float,
        json_body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> Any:
        if self._api_key is None:
            raise ConfigError(MISSING_KEY_MESSAGE)
        headers = {"Authorization": f"Bearer {self._api_key}", "Accept": "application/json"}
        content: bytes | None = None
        if json_body is not None:
            headers["Content-Type"] = "application/json"
            content = json.dumps(json_body).encode()
        started = time.perf_counter()
        with _map_httpx_errors():
            response = await self._http.request(
                method,
                self.base_url + path,
                params=params,
                headers=headers,
                content=content,
                timeout=timeout_s,
            )
        elapsed_ms = (time.perf_counter() - started) * 1000
        # Bodies are never logged: they can hold prompts, program output or signed URLs.
        logger.info("%s %s -> %d in %.0f ms", method, path, response.status_code, elapsed_ms)
        if response.status_code >= 400:
            raise _status_error(response)
        try:
            return response.json()
        except ValueError as exc:
            raise RemoteUnreadable(
                f"{method} {path} answered with a body that is not JSON"
            ) from exc


@contextlib.contextmanager
def _map_httpx_errors() -> Iterator[None]:
    try:
        yield
    except httpx.TimeoutException as exc:  # first: every timeout is also a TransportError
        raise RemoteTimeout(str(exc) or "timed out") from exc
    except httpx.TransportError as exc:
        raise RemoteUnavailable(str(exc) or type(exc).__name__) from exc


def _status_error(response: httpx.Response) -> RemoteStatusError:
    message, code = parse_error_body(response)
    status = response.status_code
    if status in (401, 403):
        return RemoteAuthError(status, message, code)
    return RemoteStatusError(status, message, code)


def parse_error_body(response: httpx.Response) -> tuple[str, str | None]:
    """Mistral's error body as ``(message, code)``, read defensively (docs/mistral.md §2.1).

    ``code`` is compared as a string, so ``3004`` and ``"3004"`` agree. Pydantic ``detail``
    lists, nested in ``message`` or at the top level, flatten to ``loc: msg`` items.
    """
    try:
        body = response.json()
    except ValueError:
        body = None
        message = " ".join(response.text.split())[:_RAW_CHARS]
    code: str | None = None
    if isinstance(body, dict):
        raw_code = body.get("code")
        code = None if raw_code is None else str(raw_code)
        raw = body.get("message")
        if raw is None and "detail" in body:
            raw = body["detail"]
        message = _flatten(raw)
    elif body is not None:
        message = " ".join(json.dumps(body).split())[:_RAW_CHARS]
    message = message or response.reason_phrase or f"HTTP {response.status_code}"
    return message[:_MESSAGE_CHARS], code


def _flatten(raw: object) -> str:
    if isinstance(raw, str):
        return raw.strip()
    if isinstance(raw, dict):
        if "detail" in raw:
            return _flatten(raw["detail"])
        return json.dumps(raw)[:_RAW_CHARS]
    if isinstance(raw, list):
        return "; ".join(_flatten_item(item) for item in raw)
    return "" if raw is None else str(raw)


def _flatten_item(item: object) -> str:
    if not isinstance(item, dict):
        return str(item)
    msg = str(item.get("msg", "")).strip() or json.dumps(item)[:_RAW_CHARS]
    loc = item.get("loc")
    if isinstance(loc, list) and loc:
        return f"{'.'.join(str(p) for p in loc)}: {msg}"
    return msg

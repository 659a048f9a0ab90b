"""A streaming ``multipart/form-data`` reader, so uploads never sit whole in memory.

Starlette's form parser reads a whole body before the handler runs; DIAL's rules want the
opposite (docs/dial.md §4.6): check the target path as soon as the part's headers arrive, then
write the data as it comes and stop at ``UPLOAD_MAX_SIZE + 1`` bytes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

__all__ = ["MultipartReader", "Part", "content_type_of"]

_MAX_HEADERS = 16  # per part; a real form part carries two or three


def content_type_of(request: Request) -> tuple[str, dict[bytes, bytes]]:
    """The request's media type (lower case) and its parameters."""
    media, params = parse_options_header(request.headers.get("content-type"))
    return media.decode("latin-1").lower(), params


@dataclass(slots=True)
class Part:
    """One part's headers; its data is read with :meth:`MultipartReader.chunks`."""

    name: str
    filename: str | None
    """None for a plain form field (no ``filename`` in its Content-Disposition)."""
    content_type: str | None


class MultipartReader:
    """Parts of a multipart body, in order, read from the request stream on demand."""

    def __init__(self, request: Request, boundary: bytes) -> None:
        self.malformed = False
        """The body broke the multipart grammar; reading stopped there."""
        self._stream = request.stream().__aiter__()
        self._events: deque[tuple[str, object]] = deque()
        self._field = bytearray()
        self._value = bytearray()
        self._headers: dict[bytes, bytes] = {}
        self._done = False
        self._parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._headers.clear,
                "on_header_field": lambda d, s, e: self._field.extend(d[s:e]),
                "on_header_value": lambda d, s, e: self._value.extend(d[s:e]),
                "on_header_end": self._header_end,
                "on_headers_finished": lambda: self._events.append(("part", dict(self._headers))),
                "on_part_data": lambda d, s, e: self._events.append(("data", bytes(d[s:e]))),
                "on_part_end": lambda: self._events.append(("end", None)),
                "on_end": lambda: self._events.append(("done", None)),
            },
            max_header_count=_MAX_HEADERS,
        )

    @classmethod
    def of(cls, request: Request) -> MultipartReader | None:
        """A reader, or None when the request is not ``multipart/form-data``."""
        media, params = content_type_of(request)
        boundary = params.get(b"boundary")
        if media != "multipart/form-data" or not boundary:
            return None
        return cls(request, boundary)

    def _header_end(self) -> None:
        self._headers[bytes(self._field).strip().lower()] = bytes(self._value).strip()
        self._field.clear()
        self._value.clear()

    async def _next_event(self) -> tuple[str, object]:
        while not self._events:
            if self._done:
                return ("done", None)
            try:
                chunk = await self._stream.__anext__()
            except StopAsyncIteration:
                self._done = True
                self.malformed = True  # the body ended before the closing boundary
                continue
            try:
                self._parser.write(chunk)
            except MultipartParseError:
                self._done = True
                self.malformed = True
                self._events.clear()
        event = self._events.popleft()
        if event[0] == "done":
            self._done = True
        return event

    async def next_part(self) -> Part | None:
        """The next part's headers (skipping the rest of the current part), or None."""
        while True:
            kind, payload = await self._next_event()
            if kind == "done":
                return None
            if kind == "part":
                assert isinstance(payload, dict)
                return _part(payload)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The current part's data as it arrives; stops early when the body is malformed."""
        while True:
            kind, payload = await self._next_event()
            if kind == "data":
                assert isinstance(payload, bytes)
                yield payload
            elif kind == "end":
                return
            else:
                self.malformed = True
                return


def _part(headers: dict[bytes, bytes]) -> Part:
    _, options = parse_options_header(headers.get(b"content-disposition", b""))
    filename = options.get(b"filename")
    content_type = headers.get(b"content-type")
    return Part(
        name=options.get(b"name", b"").decode("utf-8", "replace"),
        filename=None if filename is None else filename.decode("utf-8", "replace"),
        content_type=None if content_type is None else content_type.decode("latin-1"),
    )

"""Which name a connection asks for, read from its first bytes: TLS SNI or the HTTP Host.

The sandbox's bytes are untrusted: every length is checked against what has arrived and
against ``MAX_HELLO``; anything that does not parse names nothing (and the connection is
then judged by its address alone).
"""

from __future__ import annotations

import re

__all__ = ["MAX_HELLO", "Peek", "request_name", "sniff"]

MAX_HELLO = 16 * 1024 + 5
"""Bytes read to find the name: one TLS record (a ClientHello with post-quantum key shares
is about 2 KB) or an HTTP request head."""
_HANDSHAKE = 0x16
_CLIENT_HELLO = 0x01
_SERVER_NAME = 0x0000
_HOST_NAME = 0x00
# Line ends may be bare LFs: servers that accept them read the head that way.
_REQUEST_LINE = re.compile(rb"[A-Z]{3,10} ([^ \r\n]+) HTTP/1\.[01]\r?\n")
_ARRIVING = re.compile(rb"[A-Z]{1,10}\Z|[A-Z]{3,10} [^\n]*\Z")  # no line end yet
_HEAD_END = re.compile(rb"\n\r?\n")
_HOST = re.compile(rb"\nhost:([^\r\n]*)", re.IGNORECASE)  # no nested repeats: linear
_ABSOLUTE = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")  # scheme://authority


class Peek:
    """What the first bytes say: ``tls`` (with ``name`` from SNI), ``http`` (with ``name``
    from Host), or neither; ``complete`` once nothing more needs to arrive to know;
    ``truncated`` for a ClientHello that never ends within ``MAX_HELLO``, whose name is
    beyond reading."""

    __slots__ = ("complete", "kind", "name", "truncated")

    def __init__(
        self, kind: str = "", name: str = "", *, complete: bool = True, truncated: bool = False
    ) -> None:
        self.kind = kind
        self.name = name
        self.complete = complete
        self.truncated = truncated


def _u16(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 2], "big")


def _hello(data: bytes) -> tuple[bytes, bool, bool]:
    """The first handshake message, joined from the records it spans (a client may split
    its ClientHello, SNI and all, across several); whether it is whole; whether more may
    still arrive to make it so."""
    message, at = b"", 0
    while at + 5 <= len(data) and data[at] == _HANDSHAKE:
        size = _u16(data, at + 3)
        fragment = data[at + 5 : at + 5 + size]
        message += fragment
        if len(message) >= 4 and len(message) >= 4 + int.from_bytes(message[1:4], "big"):
            return message, True, False
        if len(fragment) < size:
            return message, False, True  # this record is still arriving
        at += 5 + size
    # Out of whole records: more may come, unless what came next is another record type.
    return message, False, at + 5 > len(data)


def _tls(data: bytes) -> Peek:
    if len(data) < 5:
        return Peek("tls", complete=False)
    body, whole, arriving = _hello(data)
    if not whole:
        if arriving and len(data) < MAX_HELLO:
            return Peek("tls", complete=False)
        return Peek("tls", truncated=True)  # a hello past MAX_HELLO or cut by another record
    if len(body) < 4 or body[0] != _CLIENT_HELLO:
        return Peek("tls")
    at = 4 + 2 + 32  # handshake header, client version, random
    if at >= len(body):
        return Peek("tls")
    at += 1 + body[at]  # session id
    if at + 2 > len(body):
        return Peek("tls")
    at += 2 + _u16(body, at)  # cipher suites
    if at >= len(body):
        return Peek("tls")
    at += 1 + body[at]  # compression methods
    if at + 2 > len(body):
        return Peek("tls")
    end = min(len(body), at + 2 + _u16(body, at))
    at += 2
    while at + 4 <= end:
        kind, size = _u16(body, at), _u16(body, at + 2)
        at += 4
        if kind == _SERVER_NAME and at + 5 <= end:
            if body[at + 2] == _HOST_NAME:
                length = _u16(body, at + 3)
                name = body[at + 5 : at + 5 + length]
                if len(name) == length:
                    return Peek("tls", _text(name))
            return Peek("tls")
        at += size
    return Peek("tls")


def _http(data: bytes, target: bytes) -> Peek:
    head_end = _HEAD_END.search(data)
    if head_end is None:
        return Peek("http", complete=len(data) >= MAX_HELLO)
    absolute = _ABSOLUTE.match(target)
    if absolute is not None:  # RFC 9112 §3.2.2: the server then ignores Host
        return Peek("http", _host(absolute.group(1).rpartition(b"@")[2]))
    found = _HOST.search(data, 0, head_end.start() + 1)
    if found is None:
        return Peek("http")
    return Peek("http", _host(found.group(1).strip(b" \t")))


def request_name(target: bytes, host: bytes | None) -> str:
    """The name an HTTP request asks for, as a server reads it: an absolute-form target's
    authority, else its Host ("" when it names none)."""
    absolute = _ABSOLUTE.match(target)
    if absolute is not None:
        return _host(absolute.group(1).rpartition(b"@")[2])
    return "" if host is None else _host(host.strip(b" \t"))


def _host(host: bytes) -> str:
    """The name in a Host value or an authority, without its port."""
    if host.startswith(b"["):  # [v6]:port
        return _text(host[1 : host.find(b"]")])
    return _text(host.rsplit(b":", 1)[0] if host.count(b":") == 1 else host)


def _text(raw: bytes) -> str:
    try:
        return raw.decode("ascii").rstrip(".").lower()
    except UnicodeDecodeError:
        return ""


def sniff(data: bytes) -> Peek:
    """What ``data``, the first bytes the sandbox sent, says of the name it wants."""
    if not data:
        return Peek(complete=False)
    data = data[:MAX_HELLO]
    if data[0] == _HANDSHAKE:
        return _tls(data)
    line = _REQUEST_LINE.match(data)
    if line is not None:
        return _http(data, line.group(1))
    if b"\n" not in data and _ARRIVING.match(data):
        return Peek("http", complete=len(data) >= MAX_HELLO)  # its request line still arriving
    return Peek()

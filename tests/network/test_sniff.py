"""Which name a connection's first bytes ask for: SNI from real TLS ClientHellos (made by this
Python's own ssl), the Host of HTTP/1.0 and 1.1 heads, nothing from anything else, and no
exception from any bytes at all."""

from __future__ import annotations

import functools
import ssl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.network._sniff import MAX_HELLO, sniff


@functools.cache
def client_hello(server_hostname: str | None) -> bytes:
    """The first flight a TLS client sends for ``server_hostname`` (no SNI for None)."""
    context = ssl.create_default_context()
    if server_hostname is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()  # it waits for a server that never answers
    hello = outgoing.read()
    assert hello[0] == 0x16  # a handshake record
    return hello


# TLS ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "seen"),
    [
        ("pypi.org", "pypi.org"),
        ("Files.PythonHosted.ORG", "files.pythonhosted.org"),
        ("a." * 60 + "example", "a." * 60 + "example"),
    ],
)
def test_sni_is_read_from_a_real_client_hello(asked: str, seen: str) -> None:
    peek = sniff(client_hello(asked))
    assert (peek.kind, peek.name, peek.complete) == ("tls", seen, True)


def test_a_client_hello_without_sni_is_tls_naming_nothing() -> None:
    peek = sniff(client_hello(None))
    assert (peek.kind, peek.name, peek.complete) == ("tls", "", True)


def test_a_client_hello_for_an_address_names_nothing() -> None:
    peek = sniff(client_hello("192.0.2.1"))  # ssl sends no SNI for an IP address
    assert (peek.kind, peek.name) == ("tls", "")


@pytest.mark.parametrize("size", [1, 7, 64, 300])
def test_a_client_hello_arriving_in_pieces_is_incomplete_until_whole(size: int) -> None:
    hello = client_hello("pypi.org")
    received = b""
    for start in range(0, len(hello), size):
        received += hello[start : start + size]
        peek = sniff(received)
        if len(received) < len(hello):
            assert (peek.kind, peek.name, peek.complete) == ("tls", "", False)
    assert (peek.kind, peek.name, peek.complete) == ("tls", "pypi.org", True)


def test_bytes_after_the_client_hello_change_nothing() -> None:
    peek = sniff(client_hello("pypi.org") + b"\x17\x03\x03\x00\x10" + bytes(16))
    assert (peek.kind, peek.name, peek.complete) == ("tls", "pypi.org", True)


def test_a_client_hello_longer_than_max_hello_is_given_up_on_as_truncated() -> None:
    # A record of 65535 bytes holding a ClientHello of 65531: more than is ever read.
    header = b"\x16\x03\x01\xff\xff" + b"\x01\x00\xff\xfb"
    assert not sniff(header + bytes(100)).complete
    peek = sniff(header + bytes(MAX_HELLO))
    assert (peek.kind, peek.name, peek.complete, peek.truncated) == ("tls", "", True, True)


def test_a_client_hello_split_across_records_is_joined() -> None:
    hello = client_hello("pypi.org")
    message = hello[5:]  # the handshake message, out of its one record
    records = b"".join(
        b"\x16\x03\x01" + len(piece).to_bytes(2, "big") + piece
        for piece in (message[i : i + 100] for i in range(0, len(message), 100))
    )
    assert len(records) > len(hello)  # several records
    for cut in (len(records) - 50, len(records) - 1):
        assert not sniff(records[:cut]).complete
    peek = sniff(records)
    assert (peek.kind, peek.name, peek.complete, peek.truncated) == ("tls", "pypi.org", True, False)


def test_a_hello_cut_short_by_another_record_type_names_nothing_and_says_so() -> None:
    message = client_hello("pypi.org")[5:]
    first = b"\x16\x03\x01" + (100).to_bytes(2, "big") + message[:100]
    peek = sniff(first + b"\x17\x03\x03\x00\x10" + bytes(16))
    assert (peek.kind, peek.name, peek.truncated) == ("tls", "", True)


def test_a_handshake_that_is_no_client_hello_names_nothing() -> None:
    server_hello = b"\x16\x03\x03\x00\x04\x02\x00\x00\x00"
    assert (sniff(server_hello).kind, sniff(server_hello).name) == ("tls", "")


# HTTP -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "seen"),
    [
        (b"GET / HTTP/1.1\r\nHost: pypi.org\r\n\r\n", "pypi.org"),
        (b"GET / HTTP/1.0\r\nHost: pypi.org\r\n\r\n", "pypi.org"),
        (b"HEAD /x HTTP/1.1\r\nAccept: */*\r\nHOST:PyPI.Org\r\n\r\n", "pypi.org"),
        (b"GET / HTTP/1.1\r\nhOsT: \t pypi.org \t\r\nAccept: */*\r\n\r\n", "pypi.org"),
        (b"GET / HTTP/1.1\r\nHost: pypi.org.\r\n\r\n", "pypi.org"),
        (b"GET / HTTP/1.1\r\nHost: pypi.org:8080\r\n\r\n", "pypi.org"),
        (b"OPTIONS * HTTP/1.1\r\nHost: [2001:DB8::1]:8080\r\n\r\n", "2001:db8::1"),
        (b"GET / HTTP/1.1\r\nHost: [2001:db8::1]\r\n\r\n", "2001:db8::1"),
        (b"POST /upload HTTP/1.1\r\nHost: pypi.org\r\nContent-Length: 4\r\n\r\nbody", "pypi.org"),
        (b"GET / HTTP/1.1\r\nX-Host: pypi.org\r\n\r\n", ""),
        (b"GET / HTTP/1.0\r\n\r\n", ""),
        (b"GET / HTTP/1.1\r\nHost: b\xc3\xbccher.example\r\n\r\n", ""),
    ],
)
def test_host_is_read_from_an_http_head(head: bytes, seen: str) -> None:
    peek = sniff(head)
    assert (peek.kind, peek.name, peek.complete) == ("http", seen, True)


def test_a_host_in_the_body_is_not_the_requests() -> None:
    head = b"POST / HTTP/1.1\r\nContent-Length: 24\r\n\r\nx\r\nHost: pypi.org\r\n\r\n"
    assert (sniff(head).kind, sniff(head).name) == ("http", "")


def test_a_long_request_line_is_still_http() -> None:
    path = b"/simple/" + b"a-package-with-a-rather-long-name" * 20 + b"/?page=2"
    peek = sniff(b"GET " + path + b" HTTP/1.1\r\nHost: pypi.org\r\n\r\n")
    assert (peek.kind, peek.name, peek.complete) == ("http", "pypi.org", True)


def test_an_absolute_form_target_names_its_authority() -> None:
    # RFC 9112 §3.2.2: a server receiving an absolute-form target ignores Host.
    head = b"GET http://user@PyPI.org:80/simple/ HTTP/1.1\r\nHost: example.com\r\n\r\n"
    assert sniff(head).name == "pypi.org"
    head6 = b"GET http://[2001:db8::5]/ HTTP/1.1\r\nHost: example.com\r\n\r\n"
    assert sniff(head6).name == "2001:db8::5"


def test_bare_line_feeds_are_read_as_servers_that_accept_them_read_them() -> None:
    peek = sniff(b"GET / HTTP/1.1\nAccept: */*\nHost: pypi.org\n\n")
    assert (peek.kind, peek.name, peek.complete) == ("http", "pypi.org", True)


@pytest.mark.parametrize(
    "part",
    [
        b"G",
        b"GE",
        b"GET",
        b"GET ",
        b"GET /",
        b"GET /simple/numpy",
        b"GET /simple/numpy HTTP/1.",
        b"GET /simple/numpy HTTP/1.1\r",
        b"GET / HTTP/1.1\r\n",
        b"GET / HTTP/1.1\r\nHost: pypi.org",
        b"GET / HTTP/1.1\r\nHost: pypi.org\r\n",
    ],
)
def test_an_http_head_still_arriving_is_incomplete(part: bytes) -> None:
    peek = sniff(part)
    assert (peek.kind, peek.name, peek.complete) == ("http", "", False)


def test_a_head_that_never_ends_is_given_up_on_at_max_hello() -> None:
    head = b"GET / HTTP/1.1\r\nHost: pypi.org\r\nX-Pad: " + b"x" * MAX_HELLO
    peek = sniff(head)
    assert (peek.kind, peek.complete) == ("http", True)


@pytest.mark.parametrize(
    "data",
    [
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"hello, world\r\n\r\n",
        b"\x00\x01\x02\x03",
        b"get / http/1.1\r\nHost: pypi.org\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"GET / HTTP/1.1 trailing\r\nHost: pypi.org\r\n\r\n",
        b"GET  / HTTP/1.1\r\nHost: pypi.org\r\n\r\n",
    ],
)
def test_anything_else_names_nothing_at_once(data: bytes) -> None:
    peek = sniff(data)
    assert (peek.kind, peek.name, peek.complete) == ("", "", True)


def test_nothing_yet_is_incomplete() -> None:
    assert not sniff(b"").complete


# no bytes make it raise -----------------------------------------------------------------


@settings(max_examples=200, deadline=None, database=None)
@given(st.binary(max_size=MAX_HELLO))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    peek = sniff(data)
    assert peek.kind in {"", "tls", "http"}
    assert peek.name == peek.name.lower()


@settings(max_examples=100, deadline=None, database=None)
@given(st.sampled_from([b"\x16\x03\x01", b"GET / HTTP/1.1\r\n", b"GET "]), st.binary(max_size=600))
def test_arbitrary_bytes_after_a_plausible_start_never_raise(start: bytes, rest: bytes) -> None:
    assert sniff(start + rest).kind in {"tls", "http", ""}


@settings(max_examples=100, deadline=None, database=None)
@given(st.data())
def test_a_truncated_or_corrupted_client_hello_never_raises(data: st.DataObject) -> None:
    hello = client_hello("files.pythonhosted.org")
    cut = data.draw(st.integers(0, len(hello)))
    peek = sniff(hello[:cut])
    if cut < len(hello):
        assert (peek.name, peek.complete) == ("", False)
    corrupted = bytearray(hello)
    for _ in range(data.draw(st.integers(1, 8))):
        corrupted[data.draw(st.integers(5, len(hello) - 1))] = data.draw(st.integers(0, 255))
    assert sniff(bytes(corrupted)).kind == "tls"

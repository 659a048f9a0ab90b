"""corral's resolver for a sandbox, one datagram at a time: queries built with dnspython, the
resolver a recording stand-in for the policy's (which is what ``answer`` is given)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.network._dns import MAX_QUERY, answer
from corral.network._policy import Address

pytestmark = pytest.mark.anyio

KNOWN: dict[str, tuple[Address, ...]] = {
    "pypi.org": (
        ipaddress.ip_address("151.101.0.223"),
        ipaddress.ip_address("151.101.64.223"),
        ipaddress.ip_address("2a04:4e42::223"),
    ),
    "v4.example": (ipaddress.ip_address("192.0.2.4"),),
    "v6.example": (ipaddress.ip_address("2001:db8::6"),),
}


class Resolver:
    """The policy's resolver as ``answer`` sees it: known names' addresses, nothing else."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, name: str) -> Sequence[Address]:
        self.asked.append(name)
        return KNOWN.get(name, ())


async def ask(query: dns.message.Message, resolver: Resolver | None = None) -> dns.message.Message:
    reply = await answer(query.to_wire(), resolver or Resolver())
    assert reply is not None
    return dns.message.from_wire(reply)


def addresses(reply: dns.message.Message) -> list[str]:
    return sorted(item.to_text() for rrset in reply.answer for item in rrset)


async def test_a_is_answered_with_the_names_ipv4_addresses_and_a_ttl() -> None:
    resolver = Resolver()
    query = dns.message.make_query("PyPI.org.", "A")
    reply = await ask(query, resolver)
    assert reply.id == query.id
    assert reply.rcode() == dns.rcode.NOERROR
    assert reply.flags & dns.flags.QR
    assert reply.flags & dns.flags.RA
    assert addresses(reply) == ["151.101.0.223", "151.101.64.223"]
    (rrset,) = reply.answer
    assert rrset.rdtype == dns.rdatatype.A
    assert rrset.name.to_text() == "PyPI.org."  # the question's name, as asked
    assert 0 < rrset.ttl <= 300
    assert resolver.asked == ["pypi.org"]  # lower case, no final dot


async def test_aaaa_is_answered_with_the_names_ipv6_addresses() -> None:
    reply = await ask(dns.message.make_query("pypi.org", "AAAA"))
    assert reply.rcode() == dns.rcode.NOERROR
    assert addresses(reply) == ["2a04:4e42::223"]
    assert reply.answer[0].rdtype == dns.rdatatype.AAAA


@pytest.mark.parametrize(("name", "kind"), [("v6.example", "A"), ("v4.example", "AAAA")])
async def test_a_family_the_name_lacks_is_an_empty_answer(name: str, kind: str) -> None:
    reply = await ask(dns.message.make_query(name, kind))
    assert reply.rcode() == dns.rcode.NOERROR  # the name exists
    assert reply.answer == []


@pytest.mark.parametrize("kind", ["A", "AAAA", "MX", "TXT"])
async def test_a_name_that_resolves_to_nothing_is_nxdomain(kind: str) -> None:
    reply = await ask(dns.message.make_query("refused.example", kind))
    assert reply.rcode() == dns.rcode.NXDOMAIN
    assert reply.answer == []


@pytest.mark.parametrize("kind", ["MX", "TXT", "SRV", "CNAME", "ANY"])
async def test_other_types_of_an_allowed_name_are_answered_empty(kind: str) -> None:
    reply = await ask(dns.message.make_query("pypi.org", kind))
    assert reply.rcode() == dns.rcode.NOERROR
    assert reply.answer == []


async def test_a_class_other_than_in_is_nxdomain_without_asking() -> None:
    resolver = Resolver()
    query = dns.message.make_query("pypi.org", "A", rdclass=dns.rdataclass.CH)
    reply = await ask(query, resolver)
    assert reply.rcode() == dns.rcode.NXDOMAIN
    assert resolver.asked == []


async def test_each_query_id_is_echoed() -> None:
    for wanted in (0, 1, 4242, 65535):
        query = dns.message.make_query("pypi.org", "A", id=wanted)
        assert (await ask(query)).id == wanted


@pytest.mark.parametrize(
    "datagram",
    [
        b"",
        b"\x00",
        b"GET / HTTP/1.1\r\n\r\n",
        bytes(11),  # one byte short of a header
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03pyp",  # the name cut short
    ],
)
async def test_a_datagram_that_is_not_dns_is_dropped(datagram: bytes) -> None:
    resolver = Resolver()
    assert await answer(datagram, resolver) is None
    assert resolver.asked == []


async def test_a_response_is_never_answered() -> None:
    query = dns.message.make_query("pypi.org", "A")
    response = dns.message.make_response(query)
    assert await answer(response.to_wire(), Resolver()) is None


@pytest.mark.parametrize("count", [0, 2])
async def test_a_query_without_exactly_one_question_is_dropped(count: int) -> None:
    query = dns.message.make_query("pypi.org", "A")
    if count == 2:
        query.question.append(dns.message.make_query("v4.example", "A").question[0])
    else:
        query.question.clear()
    resolver = Resolver()
    assert await answer(query.to_wire(), resolver) is None
    assert resolver.asked == []


async def test_an_answer_fits_a_plain_udp_datagram() -> None:
    reply = await answer(dns.message.make_query("pypi.org", "A").to_wire(), Resolver())
    assert reply is not None
    assert len(reply) <= MAX_QUERY


# no datagram makes it raise -------------------------------------------------------------


def _answer_now(datagram: bytes) -> bytes | None:
    """``answer`` driven to its end with no event loop: the fake resolver never waits (the
    tests may run while the anyio runner of another module's fixtures holds this thread)."""
    coroutine = answer(datagram, Resolver())
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: bytes | None = done.value
        return result
    coroutine.close()
    raise AssertionError("answer waited on something, which the fake resolver never does")


@settings(max_examples=200, deadline=None, database=None)
@given(st.binary(max_size=MAX_QUERY))
def test_arbitrary_bytes_never_raise(datagram: bytes) -> None:
    reply = _answer_now(datagram)
    if reply is not None:
        assert dns.message.from_wire(reply).id == int.from_bytes(datagram[:2], "big")


@settings(max_examples=100, deadline=None, database=None)
@given(
    name=st.lists(st.binary(min_size=1, max_size=20), min_size=1, max_size=4),
    rdtype=st.integers(1, 65535),
    rdclass=st.sampled_from([dns.rdataclass.IN, dns.rdataclass.CH, dns.rdataclass.ANY]),
    opcode=st.sampled_from([dns.opcode.QUERY, dns.opcode.IQUERY, dns.opcode.STATUS]),
    edns=st.booleans(),
)
def test_well_formed_queries_of_any_name_and_type_never_raise(
    name: list[bytes],
    rdtype: int,
    rdclass: dns.rdataclass.RdataClass,
    opcode: dns.opcode.Opcode,
    edns: bool,
) -> None:
    query = dns.message.make_query(
        dns.name.Name([*name, b""]),
        dns.rdatatype.RdataType.make(rdtype),
        rdclass=rdclass,
        use_edns=edns,
    )
    query.set_opcode(opcode)
    reply = _answer_now(query.to_wire())
    assert reply is not None
    parsed = dns.message.from_wire(reply)
    assert parsed.id == query.id
    assert parsed.rcode() in {dns.rcode.NOERROR, dns.rcode.NXDOMAIN}

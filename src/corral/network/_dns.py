"""corral's resolver for a sandbox: names its policy allows, and NXDOMAIN for every other.

The sandbox's ``/etc/resolv.conf`` names 127.0.0.1, and every DNS datagram it sends, to any
address, reaches this resolver. A name the policy allows is answered from ``[network]
hosts`` or the host's own resolver, keeping only addresses that may be dialled at all (no
loopback, link-local or private address unless ``private_allow`` lists it); the answer is
remembered, so a connection to one of those addresses can be told apart from one to an
address the code made up. A name outside the policy, or one that resolves to nothing
reachable, is NXDOMAIN: the code learns nothing of what the name would have been.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from corral.network._policy import Address, canonical

__all__ = ["MAX_QUERY", "answer"]

MAX_QUERY = 512
"""Bytes of a DNS query over UDP; a longer datagram is no query of a resolver's."""
_TTL = 30  # seconds the sandbox may cache an answer
_TYPES = {dns.rdatatype.A: socket.AF_INET, dns.rdatatype.AAAA: socket.AF_INET6}

Resolve = Callable[[str], Awaitable[Sequence[Address]]]
"""A name's reachable addresses, or none (already filtered by the policy)."""


async def answer(query: bytes, resolve: Resolve) -> bytes | None:
    """The answer to one query, or None for a datagram that is not one (dropped)."""
    try:
        message = dns.message.from_wire(query)
    except (dns.exception.DNSException, ValueError):
        return None
    if message.flags & dns.flags.QR or len(message.question) != 1:
        return None
    response = dns.message.make_response(message)
    response.flags |= dns.flags.RA
    question = message.question[0]
    name = question.name.to_text(omit_final_dot=True).lower()
    addresses = await resolve(name) if question.rdclass == dns.rdataclass.IN else ()
    if not addresses:
        response.set_rcode(dns.rcode.NXDOMAIN)
        return response.to_wire()
    family = _TYPES.get(question.rdtype)
    if family is not None:
        wanted = [str(a) for a in addresses if (a.version == 4) == (family == socket.AF_INET)]
        if wanted:
            rrset = dns.rrset.from_text_list(
                question.name, _TTL, dns.rdataclass.IN, question.rdtype, wanted
            )
            response.answer.append(rrset)
    return response.to_wire()  # NOERROR without an answer for other types: the name exists


def addresses_of(infos: Sequence[tuple[object, ...]]) -> list[Address]:
    """The addresses ``getaddrinfo`` found, once each, in its order."""
    found: list[Address] = []
    for info in infos:
        sockaddr = info[4]
        assert isinstance(sockaddr, tuple)
        try:
            address = canonical(ipaddress.ip_address(str(sockaddr[0]).split("%")[0]))
        except ValueError:
            continue
        if address not in found:
            found.append(address)
    return found

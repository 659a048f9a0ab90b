"""Who may reach what: the operator's ceiling, a sandbox's own policy, and their judgements.

An entry is a domain (``pypi.org``, which also covers nothing but itself), a wildcard
(``*.example.com``: every name below it, not the name itself), an IP address or a CIDR.
``deny`` beats ``allow``. Addresses are judged once more after a name resolves: loopback,
link-local (169.254.169.254 among them), every other non-global range and the host's own
addresses are reached only where the operator's ``private_allow`` lists them, whatever a
sandbox's policy says and whatever a name resolves to.

A sandbox's policy is always inside the ceiling: corral's own routes may ask for a subset of
it (``"network": {"allow": [...]}``; more is a :class:`PolicyError` naming the entry), E2B
sandboxes start with all of it and narrow it with E2B's ``allow_out``/``deny_out``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from corral.errors import NetworkPolicyError as PolicyError

__all__ = [
    "NO_NETWORK",
    "Address",
    "Entries",
    "NetworkCeiling",
    "SandboxNetwork",
    "canonical",
    "is_name",
    "parse_entries",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_MAX_NAME = 253
_MAX_ENTRIES = 1024  # entries one policy may hold: a policy is checked per connection
_MAX_HEADER_CHARS = 8192  # one injected header's name and value together
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110)


def _name(value: str) -> str | None:
    """``value`` as a lower-case domain name, or None if it is not one."""
    name = value.strip().rstrip(".").lower()
    if not name or len(name) > _MAX_NAME or not name.isascii():
        return None
    labels = name.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        return None
    if labels[-1].isdigit():
        return None  # an address, not a name
    return name


def is_name(value: str) -> bool:
    return _name(value) is not None


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")


def canonical(address: Address) -> Address:
    """An IPv6 address that stands for an IPv4 one as that IPv4 address: IPv4-mapped
    (``::ffff:127.0.0.1``), the old IPv4-compatible form (``::127.0.0.1``) and NAT64's
    well-known prefix (``64:ff9b::a.b.c.d``, which a NAT64 gateway dials as ``a.b.c.d``)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64 or (address in _COMPATIBLE and int(address) > 1):  # not :: or ::1
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


@dataclass(frozen=True, slots=True)
class Entries:
    """A set of network entries, parsed: names, wildcards (their suffix) and networks."""

    names: frozenset[str] = frozenset()
    wildcards: frozenset[str] = frozenset()
    """``*.example.com`` as ``example.com``."""
    networks: tuple[Network, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.names or self.wildcards or self.networks)

    def matches_name(self, name: str) -> bool:
        if name in self.names or "" in self.wildcards:
            return True
        return any(name.endswith("." + suffix) for suffix in self.wildcards)

    def matches_address(self, address: Address) -> bool:
        address = canonical(address)
        return any(address in network for network in self.networks)

    def covers(self, entry: str) -> bool:
        """Whether every name or address ``entry`` stands for matches these entries."""
        one = parse_entries([entry])
        for name in one.names:
            if not self.matches_name(name):
                return False
        for suffix in one.wildcards:
            if "" in self.wildcards:
                continue
            if not suffix or not any(
                suffix == s or suffix.endswith("." + s) for s in self.wildcards
            ):
                return False
        for network in one.networks:
            if not any(
                network.version == n.version and network.subnet_of(n)  # type: ignore[arg-type]
                for n in self.networks
            ):
                return False
        return True

    def as_list(self) -> list[str]:
        wildcards = (f"*.{suffix}" if suffix else "*" for suffix in self.wildcards)
        return sorted([*self.names, *wildcards, *map(str, self.networks)])


def parse_entries(values: Iterable[str], *, what: str = "network") -> Entries:
    """Raises: PolicyError naming the first entry that is no name, wildcard, IP or CIDR."""
    if isinstance(values, str | bytes):  # one entry, not its characters
        raise PolicyError(f"{what}: a list of entries, not the text {values!r}")
    names: set[str] = set()
    wildcards: set[str] = set()
    networks: list[Network] = []
    for count, raw in enumerate(values):
        if count >= _MAX_ENTRIES:
            raise PolicyError(f"{what}: at most {_MAX_ENTRIES} entries")
        if not isinstance(raw, str):
            raise PolicyError(f"{what}: {raw!r} is not a name, an address or a CIDR")
        value = raw.strip()
        if value == "*":
            wildcards.add("")  # every name
            continue
        if value.startswith("*."):
            suffix = _name(value[2:])
            if suffix is None:
                raise PolicyError(f"{what}: {raw!r} is not a wildcard name", raw)
            wildcards.add(suffix)
            continue
        try:
            network = ipaddress.ip_network(value, strict=False)
        except ValueError:
            name = _name(value)
            if name is None:
                raise PolicyError(
                    f"{what}: {raw!r} is not a name, an address or a CIDR", raw
                ) from None
            names.add(name)
            continue
        if isinstance(network, ipaddress.IPv6Network) and network.prefixlen >= 96:
            mapped = network.network_address.ipv4_mapped
            if mapped is not None:  # ::ffff:a.b.c.d/n is a.b.c.d/(n - 96)
                network = ipaddress.ip_network(f"{mapped}/{network.prefixlen - 96}")
        networks.append(network)
    return Entries(frozenset(names), frozenset(wildcards), tuple(networks))


Inject = Mapping[str, Mapping[str, str]]
"""Host name to the headers added to its HTTP and HTTPS requests (secrets the code uses)."""


def parse_inject(value: object, allowed: Entries) -> Inject:
    """``{host: {header: value}}`` checked: hosts are names the policy allows, headers are
    tokens, values printable.

    Raises:
        PolicyError: a malformed rule, or one for a host the policy does not allow.
    """
    if not isinstance(value, Mapping):
        raise PolicyError("inject is an object of host names to header objects")
    rules: dict[str, Mapping[str, str]] = {}
    for host, headers in value.items():
        name = _name(host) if isinstance(host, str) else None
        if name is None:
            raise PolicyError(f"inject: {host!r} is not a host name", str(host))
        if not allowed.matches_name(name):
            raise PolicyError(f"inject: {host!r} is not allowed by the policy", host)
        if not isinstance(headers, Mapping) or not headers:
            raise PolicyError(f"inject: {host!r} needs an object of headers", host)
        checked: dict[str, str] = {}
        for header, text in headers.items():
            if not isinstance(header, str) or not _TOKEN.fullmatch(header):
                raise PolicyError(f"inject: {header!r} is not a header name", host)
            if not isinstance(text, str) or not text.isprintable() or not text.isascii():
                raise PolicyError(f"inject: the value of {header!r} must be printable ASCII")
            if len(header) + len(text) > _MAX_HEADER_CHARS:
                raise PolicyError(f"inject: the header {header!r} is too long", host)
            checked[header] = text
        rules[name] = MappingProxyType(checked)
    return MappingProxyType(rules)


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkCeiling:
    """The operator's ``[network]``: the most any sandbox may reach, and how much."""

    allow: Entries = Entries()
    deny: Entries = Entries()
    private_allow: Entries = Entries()
    hosts: Mapping[str, tuple[Address, ...]] = field(default_factory=dict)
    """Static answers of corral's resolver (checked against the policy like any name)."""
    max_bytes: int = 1 << 30
    """Bytes one sandbox may move (both directions); past it its connections are cut."""
    max_connections: int = 64
    """Connections one sandbox may hold open at once."""
    upstream_ca: str = ""
    """An extra CA bundle (a PEM file) trusted for upstream TLS."""

    @property
    def enabled(self) -> bool:
        """Whether any sandbox may have a network at all."""
        return bool(self.allow)

    @classmethod
    def parse(
        cls,
        *,
        allow: Sequence[str] = (),
        deny: Sequence[str] = (),
        private_allow: Sequence[str] = (),
        hosts: Mapping[str, str | Sequence[str]] | None = None,
        max_bytes: int = 1 << 30,
        max_connections: int = 64,
        upstream_ca: str = "",
    ) -> NetworkCeiling:
        """Raises: PolicyError for any entry that is not one."""
        private = parse_entries(private_allow, what="private_allow")
        if private.names or private.wildcards:
            raise PolicyError("private_allow lists addresses and CIDRs, not names")
        static: dict[str, tuple[Address, ...]] = {}
        for host, answer in (hosts or {}).items():
            name = _name(host)
            if name is None:
                raise PolicyError(f"hosts: {host!r} is not a host name", host)
            answers = [answer] if isinstance(answer, str) else list(answer)
            try:
                static[name] = tuple(canonical(ipaddress.ip_address(a)) for a in answers)
            except ValueError:
                raise PolicyError(f"hosts: {host!r} must map to IP addresses", host) from None
        if max_bytes < 1 or max_connections < 1:
            raise PolicyError("max_bytes and max_connections must be positive")
        return cls(
            allow=parse_entries(allow, what="allow"),
            deny=parse_entries(deny, what="deny"),
            private_allow=private,
            hosts=MappingProxyType(static),
            max_bytes=max_bytes,
            max_connections=max_connections,
            upstream_ca=upstream_ca,
        )

    def reachable(self, address: Address, own: frozenset[Address] = frozenset()) -> bool:
        """Whether an address may be dialled at all: a global one (not the host's own), or
        one ``private_allow`` lists."""
        address = canonical(address)
        if self.private_allow.matches_address(address):
            return True
        return address.is_global and address not in own

    # a sandbox's policy ----------------------------------------------------------------

    def bound(self, policy: SandboxNetwork) -> SandboxNetwork:
        """``policy`` held inside the ceiling, however it was made: each of its entries must
        be one the ceiling allows, and the ceiling's ``deny`` is added to its own.

        Raises:
            PolicyError: naming the first entry beyond the ceiling.
        """
        for entry in policy.allow.as_list():
            if not self.allow.covers(entry):
                raise PolicyError(f"{entry!r} is beyond what this server allows", entry)
        deny = policy.deny
        merged = Entries(
            deny.names | self.deny.names,
            deny.wildcards | self.deny.wildcards,
            tuple(dict.fromkeys((*deny.networks, *self.deny.networks))),
        )
        return replace(policy, deny=merged)

    def whole(self) -> SandboxNetwork:
        """All of the ceiling: an E2B sandbox's default, corral's ``"network": true``."""
        return SandboxNetwork(allow=self.allow, deny=self.deny)

    def subset(self, allow: Sequence[str], inject: object = None) -> SandboxNetwork:
        """What a corral request asks for, which must lie inside the ceiling.

        Raises:
            PolicyError: an entry the ceiling does not cover, or a bad inject rule.
        """
        asked = parse_entries(allow, what="allow")
        for entry in allow:
            if not self.allow.covers(entry):
                raise PolicyError(f"{entry!r} is beyond what this server allows", entry)
        rules = {} if inject is None else parse_inject(inject, asked)
        return SandboxNetwork(allow=asked, deny=self.deny, inject=rules)

    def e2b(
        self,
        *,
        allow_internet_access: bool | None,
        allow_out: Sequence[str] | None,
        deny_out: Sequence[str] | None,
        rules: Inject | None = None,
    ) -> SandboxNetwork:
        """E2B's options on top of the ceiling: everything it allows unless ``deny_out``
        names it, ``allow_out`` taking precedence over ``deny_out``; none at all with
        ``allow_internet_access=False``.

        Raises:
            PolicyError: a malformed entry or rule.
        """
        if allow_internet_access is False or not self.enabled:
            return SandboxNetwork()
        exceptions = parse_entries(allow_out or (), what="allow_out")
        refused = parse_entries(deny_out or (), what="deny_out")
        inject = {} if not rules else parse_inject(rules, self.allow)
        return SandboxNetwork(
            allow=self.allow, deny=self.deny, refused=refused, exceptions=exceptions,
            inject=inject,
        )  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxNetwork:
    """One sandbox's policy, always inside the ceiling it came from."""

    allow: Entries = Entries()
    deny: Entries = Entries()
    """The ceiling's ``deny``: never reached, whatever else says so."""
    refused: Entries = Entries()
    """E2B's ``deny_out``: refused unless ``exceptions`` (E2B's ``allow_out``) names it."""
    exceptions: Entries = Entries()
    inject: Inject = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.allow)

    def allows_name(self, name: str) -> bool:
        if not self.allow.matches_name(name) or self.deny.matches_name(name):
            return False
        if self.refused.matches_name(name) or self._refuses_everything():
            return self.exceptions.matches_name(name)
        return True

    def allows_address(self, address: Address) -> bool:
        """Whether the address itself is allowed (an IP or CIDR entry), not through a name."""
        address = canonical(address)
        if not self.allow.matches_address(address) or self.deny.matches_address(address):
            return False
        if self.refused.matches_address(address) or self._refuses_everything():
            return self.exceptions.matches_address(address)
        return True

    def _refuses_everything(self) -> bool:
        """E2B's ``deny_out`` of ``0.0.0.0/0`` (or ``::/0``) is all traffic, both families."""
        everything = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
        return any(n in everything for n in self.refused.networks)

    def describe(self) -> dict[str, object]:
        """What ``get_info`` and a session's description show (never injected values)."""
        return {
            "allow": self.allow.as_list(),
            "deny": sorted({*self.deny.as_list(), *self.refused.as_list()}),
            "exceptions": self.exceptions.as_list(),
            "inject": sorted(self.inject),
        }


NO_NETWORK = SandboxNetwork()

"""E2B's network options on corral's egress: ``allow_internet_access``, ``network`` at
create, ``update_network`` while the sandbox runs, and what ``get_info`` shows of them.

An E2B sandbox starts with all of the server's ``[network] allow`` (E2B's default: on), and
narrows it as E2B documents: ``deny_out`` refuses what it names (``0.0.0.0/0``: everything),
``allow_out`` names exceptions to it, ``allow_internet_access=False`` is no network at all;
``rules`` add static headers to a host's requests (the code never sees them). ``egress_proxy``
is not served (400); ``dns_servers`` has nothing to open, since corral answers the sandbox's
DNS itself. A key with ``network = false`` gets no network whatever it asks.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corral.e2b._service import fail
from corral.errors import NetworkPolicyError
from corral.network import NO_NETWORK, NetworkCeiling, SandboxNetwork

__all__ = ["NetworkOptions", "NetworkUpdate", "network_info", "sandbox_network"]

_MAX_ENTRIES = 1024
_REDACTED = "<redacted>"  # get_info names a rule's headers, never their values


class _Transform(BaseModel):
    model_config = ConfigDict(extra="forbid")

    headers: dict[str, str] = Field(default_factory=dict)


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    transform: _Transform | None = None


class NetworkOptions(BaseModel):
    """E2B's ``network`` (camelCase on the wire)."""

    model_config = ConfigDict(extra="ignore")

    allowOut: list[str] | None = Field(default=None, max_length=_MAX_ENTRIES)
    denyOut: list[str] | None = Field(default=None, max_length=_MAX_ENTRIES)
    rules: dict[str, list[_Rule]] | None = None
    egressProxy: dict[str, Any] | None = None
    dnsServers: list[str] | None = None
    allowPublicTraffic: bool | None = None


class NetworkUpdate(NetworkOptions):
    """``PUT /sandboxes/{id}/network``: it replaces every egress rule at once."""

    allow_internet_access: bool | None = None


def _headers(rules: dict[str, list[_Rule]] | None) -> dict[str, dict[str, str]]:
    merged: dict[str, dict[str, str]] = {}
    for host, listed in (rules or {}).items():
        for rule in listed:
            if rule.transform is not None and rule.transform.headers:
                merged.setdefault(host, {}).update(rule.transform.headers)
    return merged


def sandbox_network(
    ceiling: NetworkCeiling,
    *,
    may_network: bool,
    allow_internet_access: bool | None,
    options: NetworkOptions | None,
) -> SandboxNetwork:
    """The sandbox's policy, or E2B's 400 for options corral cannot honour."""
    if options is not None and options.egressProxy:
        fail(400, "network.egress_proxy is not served by corral: its egress goes out directly")
    if not may_network:
        return NO_NETWORK
    try:
        return ceiling.e2b(
            allow_internet_access=allow_internet_access,
            allow_out=None if options is None else options.allowOut,
            deny_out=None if options is None else options.denyOut,
            rules=_headers(None if options is None else options.rules) or None,
        )
    except NetworkPolicyError as exc:
        fail(400, f"network: {exc}")


def network_info(policy: SandboxNetwork) -> dict[str, Any]:
    """``get_info``'s ``network``: what the sandbox may reach now, values of headers hidden."""
    described = policy.describe()
    return {
        "allowOut": described["exceptions"] or described["allow"],
        "denyOut": described["deny"],
        "rules": {
            host: [{"transform": {"headers": dict.fromkeys(headers, _REDACTED)}}]
            for host, headers in policy.inject.items()
        },
    }

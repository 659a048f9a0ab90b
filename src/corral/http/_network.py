"""What a request's ``"network"`` asks for, as a sandbox policy inside the server's ceiling.

corral's own routes (``/v1/execute``, ``open_session``) give a sandbox a network only when
the request says so: ``"network": true`` is all of ``[network] allow``, ``{"allow": [...],
"inject": {host: {header: value}}}`` a part of it with headers added to a host's requests.
More than the ceiling, a key with ``network = false``, or a server without ``[network]`` is
422 naming ``network``. DIAL's own requests never carry it, so DIAL's clients never get one.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from corral.errors import NetworkPolicyError
from corral.http._auth import Caller
from corral.http._errors import ApiError
from corral.network import NO_NETWORK, NetworkCeiling, SandboxNetwork

__all__ = ["NetworkRequest", "sandbox_network"]

_MAX_ENTRIES = 256  # entries one request may ask for


class NetworkRequest(BaseModel):
    """A part of the server's ``[network] allow``, and headers for some of its hosts."""

    model_config = ConfigDict(extra="forbid", strict=True)

    allow: list[str] = Field(max_length=_MAX_ENTRIES)
    """Domains, wildcards, addresses or CIDRs, each inside the server's ceiling."""
    inject: dict[str, dict[str, str]] | None = None
    """Host to headers added to its HTTP and HTTPS requests; the code never sees them."""


def sandbox_network(
    ceiling: NetworkCeiling, caller: Caller, asked: bool | NetworkRequest | None
) -> SandboxNetwork:
    """The policy a request asks for (nothing unless it asks).

    Raises:
        ApiError: 422 ``network`` when it cannot be had.
    """
    if asked is None or asked is False:
        return NO_NETWORK
    if not caller.api_key.network:
        raise ApiError(422, "this key's sandboxes have no network", field="network")
    if not ceiling.enabled:
        raise ApiError(422, "this server gives sandboxes no network", field="network")
    if asked is True:
        return ceiling.whole()
    try:
        return ceiling.subset(asked.allow, asked.inject)
    except NetworkPolicyError as exc:
        raise ApiError(422, str(exc), field="network") from None

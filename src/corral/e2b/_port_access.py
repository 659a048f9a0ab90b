"""Who may reach a sandbox's ports, and what it has moved through them: state of the sandbox
(``_sandboxes.Sandbox.ports``), kept in its labels across a pause to disk and a restart
(``_lifecycle``), judged by the proxy (``_ports``)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

__all__ = ["PortAccess"]

_TOKEN_BYTES = 32


@dataclass(slots=True)
class PortAccess:
    """A sandbox's way into its ports: who may use it and what it has used."""

    public: bool = False
    token: str = field(default_factory=lambda: secrets.token_urlsafe(_TOKEN_BYTES))
    connections: int = 0
    moved: int = 0

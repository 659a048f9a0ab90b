"""Governed egress: a sandbox reaches what its operator allows, judged outside the sandbox.

Above: corral.engine, which gives a sandbox a link when its run or session asks for a network
within the server's ceiling, and the front ends, which parse the requests. Below: the kernel
(netlink and nftables inside the sandbox's own network namespace, entered through its
pidfd), the host's resolver and TLS. Knows nothing of runs, sessions or wire formats: it
judges names and addresses, answers DNS and splices connections.

With no ``[network] allow`` nothing here runs and no sandbox has any network at all.
"""

import typing

from corral import _public

if typing.TYPE_CHECKING:
    from corral.network._egress import Egress, EgressLink, EgressStatistics
    from corral.network._inbound import (
        Inbound,
        InsideStream,
        PortClosed,
        connect_inside,
        loopback_up,
    )
    from corral.network._intercept import CertificateAuthority
    from corral.network._link import nftables_available, open_link
    from corral.network._policy import NO_NETWORK, NetworkCeiling, SandboxNetwork

_EXPORTS = {
    "NO_NETWORK": "corral.network._policy",
    "CertificateAuthority": "corral.network._intercept",
    "Egress": "corral.network._egress",
    "EgressLink": "corral.network._egress",
    "EgressStatistics": "corral.network._egress",
    "Inbound": "corral.network._inbound",
    "InsideStream": "corral.network._inbound",
    "NetworkCeiling": "corral.network._policy",
    "PortClosed": "corral.network._inbound",
    "connect_inside": "corral.network._inbound",
    "loopback_up": "corral.network._inbound",
    "SandboxNetwork": "corral.network._policy",
    "nftables_available": "corral.network._link",
    "open_link": "corral.network._link",
}

__all__ = [
    "NO_NETWORK",
    "CertificateAuthority",
    "Egress",
    "EgressLink",
    "EgressStatistics",
    "Inbound",
    "InsideStream",
    "NetworkCeiling",
    "PortClosed",
    "SandboxNetwork",
    "connect_inside",
    "loopback_up",
    "nftables_available",
    "open_link",
]

if not typing.TYPE_CHECKING:  # mypy reads the imports above
    __getattr__, __dir__ = _public.lazy_exports(globals(), _EXPORTS)

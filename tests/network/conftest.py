"""The stand-in internet and an engine whose sandboxes may reach it.

Both are made once per module: the namespace, its veth and servers cost about half a second,
an engine's zygote about a second. What they make carries corral-* names and is removed when
the module ends, whether its tests passed or not.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from corral._limits import Limits
from corral.engine import Engine
from corral.network import CertificateAuthority, Egress, NetworkCeiling, nftables_available
from tests.network.internet import Internet, start

_INDEXES = itertools.count(1)
NAMES = ("example.test", "secure.test", "inject.test", "pypi.test")
"""Names the stand-in serves; ``[network] hosts`` maps them to its address."""


def why_not() -> str:
    if os.geteuid() != 0:
        return "the stand-in internet needs root (a network namespace and a veth)"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    return nftables_available()


@pytest.fixture(scope="module")
def internet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Internet]:
    reason = why_not()
    if reason:
        pytest.skip(reason)
    made = start(tmp_path_factory.mktemp("internet"), next(_INDEXES))
    try:
        yield made
    finally:
        made.close()


def never_reached(internet: Internet) -> list[str]:
    """Addresses the ceiling lists in ``allow`` and a sandbox still never reaches, as they
    are not in ``private_allow``: metadata, loopback, the host's own end of the veth."""
    return ["169.254.169.254/32", "127.0.0.0/8", f"{internet.host_address}/32", "::1/128"]


def ceiling_for(internet: Internet, **changes: object) -> NetworkCeiling:
    """The stand-in's names and its two addresses allowed; the host's end of the veth (one
    of the host's own addresses) on the same /30 but never in ``private_allow``."""
    settings: dict[str, object] = {
        "allow": [
            *NAMES,
            "rebind.test",
            f"{internet.address}/32",
            f"{internet.address6}/128",
            *never_reached(internet),
        ],
        "private_allow": [f"{internet.address}/32", f"{internet.address6}/128"],
        "hosts": {
            **{name: [internet.address, internet.address6] for name in NAMES},
            "rebind.test": "127.0.0.1",
        },
        "upstream_ca": str(internet.ca_pem),
    }
    settings.update(changes)
    return NetworkCeiling.parse(**settings)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
async def engine(
    internet: Internet, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Engine]:
    folder: Path = tmp_path_factory.mktemp("egress-ca")
    egress = Egress(ceiling_for(internet), ca=CertificateAuthority(folder))
    async with Engine(capacity=2, limits=Limits(timeout=20), egress=egress) as started:
        yield started


TIGHT_CONNECTIONS = 3
TIGHT_BYTES = 1 << 20


@pytest.fixture(scope="module")
async def tight_engine(internet: Internet) -> AsyncIterator[Engine]:
    """A ceiling of three connections and 1 MiB a sandbox."""
    ceiling = ceiling_for(internet, max_connections=TIGHT_CONNECTIONS, max_bytes=TIGHT_BYTES)
    async with Engine(capacity=1, limits=Limits(timeout=20), egress=Egress(ceiling)) as started:
        yield started

"""Where pip (and uv) inside a sandbox find packages: the operator's ``[packages]``.

Every sandbox's ``/etc/pip.conf`` and ``/etc/uv/uv.toml`` name ``index_url`` (reached
through the sandbox's network, so only when its policy allows the index's host) and the
wheelhouse, bound read-only at ``WHEELHOUSE``, as a place to find wheels with no network at
all. With both, pip uses what it can reach; with neither reachable, it fails with its own
message, at once (the sandbox's resolver answers NXDOMAIN, and pip retries once).

Where packages go is the sandbox's business (``sandbox.inside._isolate.PACKAGES``: its own
``/work/.local``, gone with it); this module only writes the configuration.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass

from corral.errors import ConfigError
from corral.sandbox import WHEELHOUSE, SandboxFiles

__all__ = ["DEFAULT_PACKAGES", "PackageSources"]

_PIP_CONF = "pip.conf"
_UV_TOML = "uv/uv.toml"


def _toml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


@dataclass(frozen=True, slots=True)
class PackageSources:
    """An index URL (``""``: none) and a host folder of wheels (``""``: none)."""

    index_url: str = "https://pypi.org/simple"
    wheelhouse: str = ""

    def __post_init__(self) -> None:
        if self.index_url:
            parsed = urllib.parse.urlsplit(self.index_url)
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise ConfigError(f"[packages] index_url {self.index_url!r} is no http(s) URL")
            if any(c.isspace() or not c.isprintable() for c in self.index_url):
                raise ConfigError("[packages] index_url must not hold spaces or control codes")
        if self.wheelhouse and not (
            os.path.isabs(self.wheelhouse) and os.path.isdir(self.wheelhouse)
        ):
            raise ConfigError(
                f"[packages] wheelhouse {self.wheelhouse!r} is no folder (an absolute path)"
            )

    @property
    def index_host(self) -> str:
        return urllib.parse.urlsplit(self.index_url).hostname or ""

    def etc_files(self) -> tuple[tuple[str, str], ...]:
        """``(path under /etc, text)`` for pip's and uv's system-wide configuration."""
        pip = ["[global]"]
        uv = ["[pip]"]
        if self.index_url:
            pip.append(f"index-url = {self.index_url}")
            uv.append(f"index-url = {_toml_string(self.index_url)}")
            if self.index_url.startswith("http://"):  # the operator named it: trusted as named
                pip.append(f"trusted-host = {self.index_host}")
                uv.append(f"allow-insecure-host = [{_toml_string(self.index_host)}]")
        else:
            pip.append("no-index = true")
            uv.append("no-index = true")
        if self.wheelhouse:
            pip.append(f"find-links = {WHEELHOUSE}")
            uv.append(f"find-links = [{_toml_string(WHEELHOUSE)}]")
        return ((_PIP_CONF, "\n".join(pip) + "\n"), (_UV_TOML, "\n".join(uv) + "\n"))

    def sandbox_files(self, extra_ca: str = "") -> SandboxFiles:
        """What every sandbox's root adds to the host's files: pip's and uv's configuration,
        the wheelhouse, and ``extra_ca`` (a PEM certificate every sandbox trusts)."""
        return SandboxFiles(extra_ca=extra_ca, etc=self.etc_files(), wheelhouse=self.wheelhouse)


DEFAULT_PACKAGES = PackageSources()
"""PyPI as the index, no wheelhouse."""

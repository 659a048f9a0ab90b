"""E2B API keys: corral's configured keys, looked up by ``X-API-Key``, shaped ``e2b_<hex>``.

The E2B SDK checks a key's shape on the client (``^e2b_[0-9a-f]+$``), so keys meant for E2B
clients are generated in that shape; the server accepts any configured key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable

from corral._config import ApiKey

__all__ = ["E2BKeys", "is_e2b_key", "new_e2b_key", "same_secret"]

_KEY_SHAPE = re.compile(r"e2b_[0-9a-f]+")
_KEY_BYTES = 20  # 160 random bits, as hex


def new_e2b_key() -> str:
    """A fresh key in the shape the E2B SDK accepts."""
    return "e2b_" + secrets.token_hex(_KEY_BYTES)


def is_e2b_key(key: str) -> bool:
    return _KEY_SHAPE.fullmatch(key) is not None


def _digest(secret: str) -> bytes:
    # Keys are looked up by digest, so lookup time says nothing about a key's prefix.
    return hashlib.sha256(b"e2b-key:" + secret.encode()).digest()


class E2BKeys:
    """The configured keys; each one's sandboxes belong to an opaque owner id."""

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        keys = list(keys)
        self._owners = {
            _digest(key.key): base64.b32encode(_digest(key.key)[:15]).decode().lower()
            for key in keys
        }
        self._offline = {self._owners[_digest(key.key)] for key in keys if not key.network}
        """Owners whose keys say ``network = false``: their sandboxes never have one."""

    def may_network(self, owner: str) -> bool:
        return owner not in self._offline

    def owner(self, secret: str | None) -> str | None:
        """The owner id of ``secret``, or None when it is no configured key."""
        if not secret:
            return None
        return self._owners.get(_digest(secret))


def same_secret(given: str | None, expected: str) -> bool:
    """Constant-time comparison of an access token."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())

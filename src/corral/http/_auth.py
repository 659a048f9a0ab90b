"""Gateway callers: API keys, their buckets and DIAL's ``access.createCodeAppRoles`` rule."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from fastapi import Request

from corral._config import ApiKey
from corral.http._errors import fail

__all__ = ["Caller", "Keyring"]

ROLE_DENIED = "User doesn't have sufficient permissions to run code interpreter"


def _digest(secret: str) -> bytes:
    # Keys are looked up by digest, so lookup time says nothing about a key's prefix.
    return hashlib.sha256(secret.encode()).digest()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: sessions and the bucket are scoped to ``owner``."""

    api_key: ApiKey
    owner: str
    """An opaque, stable id of the key (never the key itself)."""
    bucket: str
    """The one storage bucket this key can read and write."""

    def may_run_code(self, allowed_roles: tuple[str, ...] | None) -> bool:
        """DIAL's createCodeAppRoles decision (docs/dial.md §5.7), first match wins."""
        if self.api_key.per_request or allowed_roles is None:
            return True
        return any(role in allowed_roles for role in self.api_key.roles)


class Keyring:
    """The configured API keys, resolved from ``Api-Key`` or ``Authorization: Bearer``."""

    def __init__(self, keys: Iterable[ApiKey], create_code_app_roles: tuple[str, ...] | None):
        self._callers: dict[bytes, Caller] = {}
        self._roles = create_code_app_roles
        for key in keys:
            digest = _digest(key.key)
            owner = base64.b32encode(digest[:15]).decode().lower()
            bucket = base64.b32encode(hashlib.sha256(b"bucket:" + digest).digest()[:15])
            self._callers[digest] = Caller(key, owner, bucket.decode().lower())

    def __len__(self) -> int:
        return len(self._callers)

    def authenticate(self, request: Request) -> Caller:
        """The caller, or 401 before any other check."""
        secret = request.headers.get("api-key")
        if secret is None:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            secret = token.strip() if scheme.lower() == "bearer" else None
        caller = self._callers.get(_digest(secret)) if secret else None
        if caller is None:
            fail(401, "Unauthorized")
        return caller

    def require_code_role(self, caller: Caller) -> None:
        """403 unless the caller may open sessions and execute code."""
        if not caller.may_run_code(self._roles):
            fail(403, ROLE_DENIED)

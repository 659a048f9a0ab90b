"""Signed file URLs: ``files.download_url`` and ``upload_url`` as the SDK builds them.

A signed URL is ``/files?path=P&signature=v1_S[&signature_expiration=T][&username=U]`` with
no header: S is the SHA-256 (base64, unpadded) of ``P:read|write:U:<access token>[:T]``. Whoever
holds the URL may use it, for that path and operation, until T; it names no sandbox, so the
sandbox is the one whose token makes the signature (the token is a 256-bit secret, so at most
one does). A host-name route (``49983-<id>.<domain>``) names the sandbox, and only its token
is tried.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Iterable
from typing import Literal

from starlette.requests import Request

from corral._digits import ascii_int
from corral.e2b._sandboxes import Sandbox
from corral.e2b._service import E2BError, fail

__all__ = ["Operation", "is_signed", "signed_sandbox"]

Operation = Literal["read", "write"]
_PREFIX = "v1_"
_EXPIRY_DIGITS = 12


def _signature(path: str, operation: Operation, user: str, token: str, expiry: int | None) -> str:
    raw = f"{path}:{operation}:{user}:{token}" + ("" if expiry is None else f":{expiry}")
    digest = hashlib.sha256(raw.encode()).digest()
    return _PREFIX + base64.b64encode(digest).rstrip(b"=").decode("ascii")


def is_signed(request: Request) -> bool:
    return "signature" in request.query_params


def signed_sandbox(
    request: Request, operation: Operation, candidates: Iterable[Sandbox]
) -> Sandbox:
    """The sandbox whose access token signed this URL for ``operation``, or E2B's 401.

    Raises:
        E2BError: 401 for a signature no sandbox made, or one past its expiry.
    """
    query = request.query_params
    given = query.get("signature", "")
    raw_expiry = query.get("signature_expiration")
    expiry = None if raw_expiry is None else ascii_int(raw_expiry, max_digits=_EXPIRY_DIGITS)
    if raw_expiry is not None and expiry is None:
        fail(400, "signature_expiration must be a Unix time in seconds")
    path, user = query.get("path", ""), query.get("username", "")
    for sandbox in candidates:
        expected = _signature(path, operation, user, sandbox.access_token, expiry)
        if hmac.compare_digest(given.encode(), expected.encode()):
            if expiry is not None and time.time() > expiry:
                fail(401, "the signed URL has expired")
            return sandbox
    raise E2BError(401, "the URL's signature is invalid for this path and operation")

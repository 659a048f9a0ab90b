"""The playground at ``GET /`` (gateway mode): one static page, no build step, no CDN.

The page's one inline script is allowed by its hash, nothing else: user HTML is shown in a
sandboxed ``srcdoc`` iframe, which inherits this policy on top of its own sandbox, so it can
run no script and load nothing from the network.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

__all__ = ["router"]

router = APIRouter()

_PAGE = (files("corral.http") / "playground.html").read_text(encoding="utf-8")
_SCRIPTS = re.findall(r"<script>(.*?)</script>", _PAGE, re.DOTALL)
_HASHES = " ".join(
    "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
    for s in _SCRIPTS
)
_POLICY = (
    f"default-src 'none'; script-src {_HASHES}; style-src 'unsafe-inline'; "
    "img-src data: blob:; connect-src 'self'; frame-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)


@router.get("/", include_in_schema=False)
async def playground() -> HTMLResponse:
    """The playground page."""
    return HTMLResponse(
        _PAGE,
        headers={"Content-Security-Policy": _POLICY, "X-Content-Type-Options": "nosniff"},
    )

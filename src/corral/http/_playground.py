"""The playground at ``GET /`` (gateway mode): one static page, no build step, no CDN."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

__all__ = ["router"]

router = APIRouter()

_PAGE = files("corral.http") / "playground.html"
# The page's own script and style only: user HTML is shown in a sandboxed iframe (srcdoc),
# which inherits this policy and so can run no script and load nothing from the network.
_POLICY = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data: blob:; connect-src 'self'; frame-src 'self' about:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)


@router.get("/", include_in_schema=False)
async def playground() -> HTMLResponse:
    """The playground page."""
    return HTMLResponse(
        _PAGE.read_text(encoding="utf-8"),
        headers={"Content-Security-Policy": _POLICY, "X-Content-Type-Options": "nosniff"},
    )

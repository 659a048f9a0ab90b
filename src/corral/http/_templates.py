"""``"template"`` on corral's own routes: a name the caller's key may use, or 404 naming it."""

from __future__ import annotations

from corral.errors import TemplateNotFound
from corral.http._engine_api import EngineAPI
from corral.http._errors import ApiError

__all__ = ["check_template"]


def check_template(
    engine: EngineAPI, owner: str, name: str | None, session_id: str | None = None
) -> str:
    """``name`` ("" for none), checked before any run or stream starts.

    Raises:
        ApiError: 404 ``template`` when the key may use no template of that name; 422 when a
            run in a session names one (a session's template is the one it was opened with).
    """
    if not name:
        return ""
    if session_id is not None:
        raise ApiError(422, "a session's template is the one it was opened with", field="template")
    try:
        engine.template(name, owner)
    except TemplateNotFound as exc:
        raise ApiError(404, str(exc), field="template") from None
    return name

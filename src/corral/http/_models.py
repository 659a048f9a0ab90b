"""Gateway request bodies, parsed as strictly as DIAL Core's Jackson mapper does.

Malformed JSON, an empty body, ``null``, a non-object, a wrong type or any unknown field is
400 ``Not valid JSON body``, exactly DIAL's text (docs/dial.md §5.1); ``null`` for an optional
field equals absent. Which field was wrong (``unknown field 'timeout'``) is said in the
``Corral-Error-Detail`` header and the log, so a person learns what to fix and a client that
compares bodies sees DIAL's. The field names are DIAL's, so they stay camelCase.
"""

from __future__ import annotations

from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral.http._errors import describe_invalid, fail
from corral.http._network import NetworkRequest

__all__ = [
    "NOT_VALID_JSON",
    "DownloadBody",
    "ExecuteBody",
    "InputFile",
    "OutputFile",
    "SessionBody",
    "TransferInBody",
    "TransferOutBody",
    "parse_body",
]


NOT_VALID_JSON = "Not valid JSON body"
"""DIAL Core's one answer to any body it cannot map (its strict Jackson mapper)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SessionBody(_Strict):
    sessionId: str | None = None


class OpenSessionBody(SessionBody):
    """DIAL's ``open_session``, and corral's one extension to it: the session's network
    (``true`` or ``{"allow": [...], "inject": {...}}``), which DIAL's clients never send."""

    network: bool | NetworkRequest | None = None
    template: str | None = Field(default=None, min_length=1, max_length=128)
    """A template's name (corral's extension): the session's sandbox is made from it."""
    snapshot: str | None = Field(default=None, min_length=1, max_length=128)
    """A snapshot's id (corral's extension, from ``/v1/sessions/{id}/snapshot``): the session
    starts as its own copy of it."""


class InputFile(_Strict):
    sessionId: str | None = None
    sourceUrl: str | None = None
    targetPath: str | None = None


class OutputFile(_Strict):
    sessionId: str | None = None
    sourcePath: str | None = None
    targetUrl: str | None = None


MAX_TRANSFERS = 256
"""``inputFiles`` / ``outputFiles`` entries one request may list: each copies a whole file."""


class ExecuteBody(_Strict):
    sessionId: str | None = None
    code: str | None = None
    inputFiles: list[InputFile] | None = Field(default=None, max_length=MAX_TRANSFERS)
    outputFiles: list[OutputFile] | None = Field(default=None, max_length=MAX_TRANSFERS)


class DownloadBody(_Strict):
    sessionId: str | None = None
    path: str | None = None
    size: int | None = None


class TransferInBody(InputFile):
    pass


class TransferOutBody(OutputFile):
    pass


Body = TypeVar("Body", bound=_Strict)


async def parse_body(request: Request, model: type[Body]) -> Body:
    """The request's JSON body as ``model``, or 400 ``Not valid JSON body``."""
    raw = await request.body()
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        fail(400, NOT_VALID_JSON, explain=describe_invalid(exc)[0])


def file_path_ok(path: str | None) -> bool:
    """DIAL's path syntax check: only a missing path or a NUL byte fail it."""
    return path is not None and "\0" not in path

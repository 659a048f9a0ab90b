"""Gateway request bodies, parsed as strictly as DIAL Core's Jackson mapper does.

Malformed JSON, an empty body, ``null``, a non-object, a wrong type or any unknown field is
400 ``Not valid JSON body`` (dial-api.md §5.1); ``null`` for an optional field equals absent.
corral appends which field was wrong (``Not valid JSON body: unknown field 'timeout'``): DIAL's
clients act on the status, and a person reading the text learns what to fix.
The field names are DIAL's, so they stay camelCase.
"""

from __future__ import annotations

from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral.http._errors import describe_invalid, fail

__all__ = [
    "DownloadBody",
    "ExecuteBody",
    "InputFile",
    "OutputFile",
    "SessionBody",
    "TransferInBody",
    "TransferOutBody",
    "parse_body",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SessionBody(_Strict):
    sessionId: str | None = None


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
        fail(400, f"Not valid JSON body: {describe_invalid(exc)[0]}")


def file_path_ok(path: str | None) -> bool:
    """DIAL's path syntax check: only a missing path or a NUL byte fail it."""
    return path is not None and "\0" not in path

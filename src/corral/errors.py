"""Every exception corral raises, in one hierarchy.

User-code failures are results (an ``ExecutionResult`` with an outcome), never exceptions.
What follows are infrastructure failures and caller mistakes that have no result to attach to::

    * CorralError
      + ConfigError       bad corral.toml, CORRAL_* variable or flag
      + IsolationError    the host cannot build the sandbox (`corral doctor` says why)
      + WorkerError       WorkerCrashed · WorkerProtocolError · ZygoteUnavailable
      + EngineError       EngineClosed · SessionClosed · SessionExists · SessionNotFound · Busy
                          · InvalidPath · AccessDenied · SessionDiskFull · BucketFull
                          · FileTooLarge · FileNotReturned · NetworkUnavailable
                          · LanguageUnavailable
      + NetworkPolicyError  a network entry or request the server cannot honour
      + TemplateError     TemplateNotFound · TemplateBuildFailed (a template's name or steps)
      + SourceError       SourceNotFound · UnsupportedSource · SourceTooLarge
      + ToolError         UnknownTool · ToolNameTaken · QuotaExceeded · InvalidToolInput
      + RemoteError       RemoteUnavailable > RemoteTimeout · RemoteStatusError > RemoteAuthError
                          · InvalidRequest · RemoteUnreadable
"""

from __future__ import annotations

__all__ = [
    "AccessDenied",
    "BucketFull",
    "Busy",
    "ConfigError",
    "CorralError",
    "EngineClosed",
    "EngineError",
    "FileNotReturned",
    "FileTooLarge",
    "InvalidPath",
    "InvalidRequest",
    "InvalidToolInput",
    "IsolationError",
    "LanguageUnavailable",
    "NetworkPolicyError",
    "NetworkUnavailable",
    "QuotaExceeded",
    "RemoteAuthError",
    "RemoteError",
    "RemoteStatusError",
    "RemoteTimeout",
    "RemoteUnavailable",
    "RemoteUnreadable",
    "SessionClosed",
    "SessionDiskFull",
    "SessionExists",
    "SessionNotFound",
    "SnapshotError",
    "SnapshotNotFound",
    "SourceError",
    "SourceNotFound",
    "SourceTooLarge",
    "TemplateBuildFailed",
    "TemplateError",
    "TemplateNotFound",
    "ToolError",
    "ToolNameTaken",
    "UnknownTool",
    "UnsupportedSource",
    "WorkerCrashed",
    "WorkerError",
    "WorkerProtocolError",
    "ZygoteUnavailable",
]


class CorralError(Exception):
    """Base of every exception corral raises on purpose."""


class ConfigError(CorralError):
    """A configuration file, environment variable or flag is invalid."""


class IsolationError(CorralError):
    """This host cannot build the sandbox; the message says which feature is missing."""


class WorkerError(CorralError):
    """A worker or the zygote failed; per run this becomes outcome ``worker_error``."""


class WorkerCrashed(WorkerError):
    """A worker died before it delivered a result."""


class WorkerProtocolError(WorkerError):
    """A worker sent a malformed or oversized message."""


class ZygoteUnavailable(WorkerError):
    """The zygote died or could not be (re)started."""


class EngineError(CorralError):
    """The engine cannot take this call in its current state."""


class EngineClosed(EngineError):
    """The engine was closed (or never started); it admits no new work."""


class SessionClosed(EngineError):
    """The session was closed or expired; open a new one."""


class SessionExists(EngineError):
    """A session with this id is already open."""


class SessionNotFound(EngineError):
    """No session has this id (or it belongs to someone else)."""


class SnapshotNotFound(EngineError):
    """No snapshot or paused state has this id (or it belongs to someone else)."""


class SnapshotError(EngineError):
    """A snapshot or paused state cannot be used: corrupt, foreign, of another format
    version, or it could not be written; the message says which."""


class Busy(EngineError):
    """The run queue is full; retry later.

    Attributes:
        retry_after: seconds a server asked the caller to wait (``Retry-After``), or None.
    """

    def __init__(self, message: str = "busy", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class InvalidPath(EngineError):
    """A session file path is malformed, escapes the session folder or crosses a symlink."""


class AccessDenied(EngineError):
    """The sandbox's user may not do this to a session path: its code took the permission
    away (``chmod 0`` on a folder). The caller's request, not the server, is at fault."""


class SessionDiskFull(EngineError):
    """Writing this file would exceed the session's disk quota."""


class BucketFull(EngineError):
    """Storing this file would take a bucket of the files store past its quota."""


class FileTooLarge(EngineError):
    """A file exceeds the size bound of this operation (an upload or read limit)."""


class FileNotReturned(EngineError, LookupError):
    """A result holds no bytes for that path: not among its files, or past the returned bound.

    Also a ``LookupError``, as a missing key is.
    """


class NetworkUnavailable(EngineError):
    """A sandbox was to have a network, and this server cannot give it one now."""


class LanguageUnavailable(EngineError, ValueError):
    """A run asked for a language corral does not know, or whose toolchain this host lacks
    (``corral doctor`` lists what is served)."""


class NetworkPolicyError(CorralError, ValueError):
    """A network entry or request that cannot be honoured (a malformed entry, more than the
    server's ceiling); ``entry`` names the one at fault."""

    def __init__(self, message: str, entry: str = "") -> None:
        super().__init__(message)
        self.entry = entry


class TemplateError(CorralError, ValueError):
    """A template that cannot be built or used as asked: a bad name, a step corral cannot
    run (an OS package, a Docker image), a layer past its bounds."""


class TemplateNotFound(TemplateError, LookupError):
    """No template of that name, or none this caller may use."""

    def __init__(self, name: str) -> None:
        super().__init__(f"template {name!r} not found")
        self.name = name


class TemplateBuildFailed(TemplateError):
    """A build step failed; ``log`` is what it printed, ``step`` which step it was."""

    def __init__(self, message: str, *, step: int = -1, log: str = "") -> None:
        super().__init__(message)
        self.step = step
        self.log = log


class SourceError(CorralError):
    """A source could not be registered or resolved."""


class SourceNotFound(SourceError):
    """No source with this id exists in this invocation."""


class UnsupportedSource(SourceError):
    """The attachment's type is not supported or its bytes are corrupt."""


class SourceTooLarge(SourceError):
    """The attachment exceeds the configured size bound."""


class ToolError(CorralError):
    """A tool could not be registered or called."""


class UnknownTool(ToolError):
    """No tool with this name is registered."""


class ToolNameTaken(ToolError):
    """Another tool already holds this name; registrations never replace each other."""


class QuotaExceeded(ToolError):
    """The invocation has spent its call quota."""


class InvalidToolInput(ToolError):
    """The arguments do not match the tool's schema."""


class RemoteError(CorralError):
    """A call to a remote API (Mistral) failed."""


class RemoteUnavailable(RemoteError):
    """The remote API could not be reached."""


class RemoteTimeout(RemoteUnavailable):
    """The remote API did not answer in time."""


class RemoteStatusError(RemoteError):
    """The remote API answered with an error status.

    Attributes:
        status: the HTTP status code.
        code: the provider's error code as a string, or None.
        message: the provider's message, flattened and capped.
    """

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(f"HTTP {status}" + (f" (code {code})" if code else "") + f": {message}")
        self.status = status
        self.code = code
        self.message = message


class RemoteAuthError(RemoteStatusError):
    """The remote API rejected the credentials (401/403)."""


class InvalidRequest(RemoteStatusError):
    """The server refused the request as invalid (400/422).

    Attributes:
        field: the offending field's dotted path, when the server named one.
    """

    def __init__(
        self, status: int, message: str, code: str | None = None, field: str | None = None
    ) -> None:
        super().__init__(status, message, code)
        self.field = field


class RemoteUnreadable(RemoteError):
    """The remote API answered with success, but with a body corral could not read."""

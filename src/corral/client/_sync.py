"""``Client`` and its ``Session``: corral's own routes over ``httpx.Client`` (blocking)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import httpx

from corral.client._async import _file, _json, _session_id
from corral.client._wire import (
    OPS,
    RemoteFile,
    TextSink,
    busy_result,
    error_for,
    execute_body,
    is_busy,
    parse_result,
    raise_for_status,
    read_line,
    retry_delay,
    transport_error,
)
from corral.engine import ExecutionResult
from corral.errors import Busy, RemoteUnreadable, SessionNotFound

__all__ = ["Client", "Session"]

from corral.client._async import DEFAULT_HTTP_TIMEOUT, DEFAULT_RETRIES, RUN_MARGIN


class Client:
    """corral's HTTP API, blocking (the same calls as :class:`AsyncClient`).

    Args:
        base_url: where ``corral serve`` listens, e.g. ``http://127.0.0.1:8000``.
        api_key: sent as ``Api-Key``.
        http_timeout: seconds to wait for an answer when a run names no ``timeout``.
        retries: extra attempts, each after the server's ``Retry-After``, on a busy answer.
        transport: an httpx transport (tests, proxies).

    Every failure is a :mod:`corral.errors` exception, never an httpx one.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        http_timeout: float = DEFAULT_HTTP_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Api-Key": api_key} if api_key else {}
        self._http = httpx.Client(
            base_url=base_url, headers=headers, timeout=http_timeout, transport=transport
        )
        self._retries = retries

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        on_stdout: TextSink | None = None,
        on_stderr: TextSink | None = None,
        return_files: bool = False,
    ) -> ExecutionResult:
        """Run ``code`` once in a fresh worker.

        With ``on_stdout``/``on_stderr``, output reaches them while the code runs.

        Raises:
            Busy: still busy after the retries (``retry_after`` says how long to wait).
            InvalidRequest, RemoteAuthError, RemoteStatusError, RemoteUnavailable: as named.
        """
        return self._execute(code, None, timeout, on_stdout, on_stderr, return_files)

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A stateful session, closed when the block ends, however it ends."""
        opened = self.request("POST", f"{OPS}/open_session", json={})
        session = Session(self, _session_id(opened))
        try:
            yield session
        finally:
            session.close()

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """One call, retried on an explicit busy answer; raises corral errors."""
        attempt = 0
        while True:
            try:
                response = self._http.request(method, url, **kwargs)
            except httpx.HTTPError as exc:
                raise transport_error(exc) from exc
            if not is_busy(response) or attempt == self._retries:
                raise_for_status(response)
                return response
            attempt += 1
            _pause(retry_delay(response))

    def _execute(
        self,
        code: str,
        session_id: str | None,
        timeout: float | None,
        on_stdout: TextSink | None,
        on_stderr: TextSink | None,
        return_files: bool,
    ) -> ExecutionResult:
        stream = on_stdout is not None or on_stderr is not None
        body = execute_body(
            code, session_id=session_id, timeout=timeout, stream=stream, return_files=return_files
        )
        wait = None if timeout is None else timeout + RUN_MARGIN
        options: dict[str, Any] = {"json": body}
        if wait is not None:
            options["timeout"] = wait
        if not stream:
            return parse_result(_json(self.request("POST", "/v1/execute", **options)))
        attempt = 0
        while True:
            result = self._stream(options, on_stdout, on_stderr)
            busy = busy_result(result)
            if busy is None:
                return result
            if attempt == self._retries:
                raise busy
            attempt += 1
            _pause(busy.retry_after or 0)

    def _stream(
        self, options: dict[str, Any], on_stdout: TextSink | None, on_stderr: TextSink | None
    ) -> ExecutionResult:
        try:
            with self._http.stream("POST", "/v1/execute", **options) as response:
                if not response.is_success:
                    raise error_for(response, response.read().decode("utf-8", "replace"))
                for line in response.iter_lines():
                    if line:
                        result = read_line(line, on_stdout, on_stderr)
                        if result is not None:
                            return result
        except httpx.HTTPError as exc:
            raise transport_error(exc) from exc
        raise RemoteUnreadable("corral's stream ended without a result")


class Session:
    """A remote session: state persists between runs; files live in its folder."""

    def __init__(self, client: Client, session_id: str) -> None:
        self._client = client
        self.id = session_id
        self.closed = False

    def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        on_stdout: TextSink | None = None,
        on_stderr: TextSink | None = None,
    ) -> ExecutionResult:
        """Run ``code`` in this session (see :meth:`Client.run`)."""
        return self._client._execute(code, self.id, timeout, on_stdout, on_stderr, False)

    def upload(self, path: str, data: bytes) -> RemoteFile:
        """Write ``data`` to ``path`` in the session folder (parents created, replaced whole)."""
        response = self._client.request(
            "POST",
            f"{OPS}/upload_file",
            params={"session_id": self.id},
            files={"file": (path, data, "application/octet-stream")},
        )
        return _file(_json(response))

    def download(self, path: str) -> bytes:
        """The bytes of ``path`` in the session folder.

        Raises:
            SessionNotFound: no such file (or session).
        """
        body = {"sessionId": self.id, "path": path}
        return (self._client.request("POST", f"{OPS}/download_file", json=body)).content

    def list_files(self) -> list[RemoteFile]:
        """Every file in the session folder, by path."""
        body = {"sessionId": self.id}
        listed = _json(self._client.request("POST", f"{OPS}/list_files", json=body))
        try:
            return [_file(item) for item in listed["files"]]
        except (KeyError, TypeError):
            raise RemoteUnreadable("corral answered an unreadable file list") from None

    def close(self) -> None:
        """Close the session (idempotent; a session the server already dropped is closed)."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Busy, SessionNotFound):
            self._client.request("POST", f"{OPS}/close_session", json={"sessionId": self.id})


def _pause(seconds: float) -> None:
    threading.Event().wait(seconds)  # a Retry-After, already bounded by retry_delay

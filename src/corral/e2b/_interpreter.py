"""The code interpreter (port 49999): ``/execute`` streaming E2B's events, and ``/contexts``.

``/execute`` answers ``application/x-ndjson``: stdout and stderr as they are produced,
``display()`` results, the
trailing expression's result, the error, the execution count, then ``end_of_execution``.
The client closing the connection (the SDK's ``timeout`` does) interrupts the run as E2B's
Jupyter server interrupts its kernel: the variables stay, unless the code ignores the
interrupt past ``INTERRUPT_GRACE``, when the interpreter restarts. ``/contexts`` calls carry
no access token in the SDK, so they are accepted by the sandbox's unguessable id alone.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping

import anyio
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from corral.e2b import _events
from corral.e2b._bash import BASH, SHELL_NAME, run_cell
from corral.e2b._contexts import PYTHON, Context
from corral.e2b._sandboxes import Sandbox
from corral.e2b._service import fail, json_response, read_body, service_of
from corral.engine import ExecutionResult, OutputEvent

__all__ = ["routes"]

_BODY_BYTES = 4 * 1024 * 1024  # the engine bounds the code itself far below this
_MAX_CWD = 4096
_PYTHON_NAMES = (None, "python", "py", "python3")
_UNSERVED = "corral's code interpreter runs python and bash"


class ExecuteBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    code: str
    context_id: str | None = None
    language: str | None = None
    env_vars: dict[str, str] | None = None


class ContextBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    language: str | None = None
    cwd: str | None = Field(default=None, max_length=_MAX_CWD)


def _sandbox_id(request: Request) -> str:
    value = request.scope["corral.e2b.sandbox"]
    assert isinstance(value, str)
    return value


def _language(language: str | None) -> str:
    """The context language ``language`` names (as E2B normalizes it), or a 400."""
    name = language.strip().lower() if language is not None else None
    if name in _PYTHON_NAMES:
        return PYTHON
    if name != BASH:
        fail(400, f"language '{language}' is not supported: {_UNSERVED}")
    return BASH


async def execute(request: Request) -> Response:
    service = service_of(request)
    sandbox = service.sandbox_for_envd(request, _sandbox_id(request))
    body: ExecuteBody = await read_body(request, ExecuteBody, max_bytes=_BODY_BYTES)
    if body.context_id is not None and body.language is not None:
        fail(400, "give context_id or language, not both")
    language = _language(body.language)
    if body.context_id is not None:
        context = sandbox.contexts.get(body.context_id)
        if context is None:
            fail(404, f"context '{body.context_id}' not found")
    else:
        context = sandbox.contexts.for_language(language)
        if context is None:
            fail(429, _FULL)
    if context.language == BASH:
        bad = next((k for k in body.env_vars or {} if not SHELL_NAME.fullmatch(k)), None)
        if bad is not None:
            fail(400, f"env_vars of a bash run must be shell names, not {bad!r}")
    return _Execution(sandbox, context, body.code, body.env_vars or {}, service.max_run_seconds)


class _Execution(Response):
    """Runs the code while it answers, one event per line; a disconnect cancels the run."""

    media_type = "application/x-ndjson"

    def __init__(
        self,
        sandbox: Sandbox,
        context: Context,
        code: str,
        run_env: Mapping[str, str],
        max_run_seconds: float,
    ) -> None:
        super().__init__(media_type=self.media_type)
        self._max_run_seconds = max_run_seconds
        self._sandbox = sandbox
        self._context = context
        self._code = code
        self._run_env = dict(run_env)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        cancel = anyio.Event()
        lines_in, lines_out = anyio.create_memory_object_stream[bytes](math.inf)
        headers = [(b"content-type", self.media_type.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            cancel.set()

        async def run() -> None:
            async with lines_in:
                for line in await self._run(cancel, lines_in.send_nowait):
                    lines_in.send_nowait(line)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_disconnect)
            tg.start_soon(run)
            async with lines_out:
                async for line in lines_out:
                    if not cancel.is_set():
                        await send({"type": "http.response.body", "body": line, "more_body": True})
            tg.cancel_scope.cancel()
        if not cancel.is_set():
            await send({"type": "http.response.body", "body": b""})

    async def _run(self, cancel: anyio.Event, emit: Callable[[bytes], None]) -> list[bytes]:
        sandbox, context = self._sandbox, self._context
        session = sandbox.session
        # A lock per context: runs in other contexts go on beside this one.
        async with context.lock:
            if sandbox.contexts.get(context.id) is not context:
                # Removed while this run waited: its interpreter is gone, and must stay so.
                removed = _events.error_event("RuntimeError", "the context was removed", "")
                return [removed, _events.end_event(context.executions)]
            preparation = sandbox.contexts.preparation(context, self._run_env)
            if preparation is not None:
                prepared = await session.run(
                    preparation, cancel=cancel, interpreter=context.interpreter
                )
                if prepared.ok and prepared.restarted:  # a new interpreter: prepare it as one
                    sandbox.contexts.interpreter_restarted(context)
                    preparation = sandbox.contexts.preparation(context, self._run_env)
                    assert preparation is not None  # a fresh interpreter always has one
                    prepared = await session.run(
                        preparation, cancel=cancel, interpreter=context.interpreter
                    )
                if not prepared.ok:
                    sandbox.contexts.interpreter_restarted(context)
                    return [*_events.from_result(prepared, streamed=False), _events.end_event(0)]
                sandbox.contexts.prepared(context, self._run_env)
            streamed = _events.StreamedOutput()

            def on_output(event: OutputEvent) -> None:
                if event.kind == "display":
                    lines = streamed.display(event.data or {})
                else:
                    lines = streamed.output(event.kind, event.text)
                for line in lines:
                    emit(line)

            # Shell lines (``!pip install``) run as in a kernel: the sandbox rewrites them.
            # E2B's kernel is interrupted, not restarted: variables survive a timeout. The
            # SDK's own timeout (it hangs up) bounds a run, then the sandbox's lifetime and
            # the operator's [e2b] max_run_seconds; never the engine's one-shot default.
            lifetime = max(1.0, sandbox.end_at - time.time())
            limits = session.limits.replace(timeout=min(self._max_run_seconds, lifetime))
            code = self._code
            if context.language == BASH:
                code = run_cell(code, self._run_env, sandbox.contexts.sandbox_env)
            result = await session.run(
                code,
                limits=limits,
                cancel=cancel,
                on_output=on_output,
                cwd=context.cwd,
                keep_state=True,
                interpreter=context.interpreter,
            )
            if result.restarted:
                sandbox.contexts.interpreter_restarted(context)
            context.executions += 1
            if context.language == BASH:
                result = _as_bash_kernel(result)
            return [
                *streamed.finish(result),
                *_events.from_result(result, streamed=True),
                _events.end_event(context.executions),
            ]


def _as_bash_kernel(result: ExecutionResult) -> ExecutionResult:
    """A bash context's result as E2B's bash kernel reports it: the last command's non-zero
    status an error named "" whose value is the status, without a traceback."""
    error = result.error
    if error is None or error.type != "SystemExit":
        return result
    return dataclasses.replace(result, error=dataclasses.replace(error, type="", traceback=""))


async def _is_folder(sandbox: Sandbox, context: Context, path: str) -> bool:
    """Whether ``path`` is a folder as the sandbox's code sees it, asked of the new
    context's own interpreter (started by it, for its first run): a context's cwd may be
    anywhere the code can reach."""
    async with context.lock:
        # A statement, not an expression: the code's ``_`` stays its own.
        code = f"print(__import__('os').path.isdir({path!r}))"
        result = await sandbox.session.run(code, interpreter=context.interpreter)
    return result.ok and result.stdout == "True\n"


_FULL = "this sandbox holds its maximum of contexts"


async def create_context(request: Request) -> Response:
    sandbox = service_of(request).sandbox_by_id(_sandbox_id(request))
    body: ContextBody = await read_body(request, ContextBody, max_bytes=_BODY_BYTES)
    language = _language(body.language)
    if body.cwd is not None and (not body.cwd.startswith("/") or "\0" in body.cwd):
        fail(400, "cwd must be an absolute path")
    context = sandbox.contexts.new(body.cwd, language)
    if context is None:
        fail(429, _FULL)
    try:
        folder = body.cwd is None or await _is_folder(sandbox, context, body.cwd)
    except BaseException:
        with anyio.CancelScope(shield=True):  # its interpreter must not outlive the call
            await sandbox.session.close_interpreter(context.interpreter)
        raise
    if not folder:
        await sandbox.session.close_interpreter(context.interpreter)
        fail(400, f"cwd {body.cwd!r} is not a folder in the sandbox")
    if not sandbox.contexts.add(context):
        await sandbox.session.close_interpreter(context.interpreter)
        fail(429, _FULL)
    return json_response(context.as_json())


async def list_contexts(request: Request) -> Response:
    sandbox = service_of(request).sandbox_by_id(_sandbox_id(request))
    return json_response([c.as_json() for c in sandbox.contexts.all()])


def _context_of(request: Request) -> tuple[Sandbox, Context]:
    sandbox = service_of(request).sandbox_by_id(_sandbox_id(request))
    context_id = request.path_params["context_id"]
    context = sandbox.contexts.get(context_id)
    if context is None:
        fail(404, f"context '{context_id}' not found")
    return sandbox, context


async def restart_context(request: Request) -> Response:
    sandbox, context = _context_of(request)
    if context.interpreter:
        await sandbox.session.close_interpreter(context.interpreter)
    sandbox.contexts.restart(context)
    return Response(status_code=204)


async def delete_context(request: Request) -> Response:
    sandbox, context = _context_of(request)
    if context.id == "default":
        fail(400, "the default context cannot be deleted")
    sandbox.contexts.delete(context)
    await sandbox.session.close_interpreter(context.interpreter)
    return Response(status_code=204)


async def health(request: Request) -> Response:
    service_of(request).sandbox_by_id(_sandbox_id(request))
    return Response(status_code=204)


routes = [
    Route("/execute", execute, methods=["POST"]),
    Route("/contexts", create_context, methods=["POST"]),
    Route("/contexts", list_contexts, methods=["GET"]),
    Route("/contexts/{context_id}/restart", restart_context, methods=["POST"]),
    Route("/contexts/{context_id}", delete_context, methods=["DELETE"]),
    Route("/health", health, methods=["GET"]),
]

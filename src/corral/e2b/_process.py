"""envd's ``process.Process`` service: Start and Connect (streamed), List, SendSignal,
SendInput, StreamInput, CloseStdin.

Commands run inside the sandbox, beside its interpreter (``Session.start_command``): the same
namespaces, files, seccomp policy and limits, ``/home/user`` as the working folder, and the
sandbox's ``envVars`` in their environment (never the server's). A command outlives the
stream that started it (``_processes``): a client that closes it only detaches, ``Connect``
attaches again, and the ``Connect-Timeout-Ms`` of its ``Start`` bounds its life, as envd's.
A ``pty`` runs the command on a real terminal (``_pty``); ``Update`` resizes it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import math
import signal
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from corral.e2b._connect import (
    ConnectError,
    ConnectStream,
    Emit,
    deadline_of,
    read_message,
    read_stream,
    stream_answer,
    unary,
)
from corral.e2b._contexts import HOME, SANDBOX_USER
from corral.e2b._processes import Event, Process, TooManyAttached
from corral.e2b._pty import input_frame, pty_argv, resize_of
from corral.e2b._sandboxes import MAX_TIMEOUT, Sandbox
from corral.e2b._service import service_of
from corral.errors import CorralError, SessionClosed, WorkerError

__all__ = ["routes"]

_SIGNALS = {"SIGNAL_SIGKILL": signal.SIGKILL, "SIGNAL_SIGTERM": signal.SIGTERM}
_MAX_ENVS = 256
_MAX_TEXT = 128 * 1024  # characters of one argument or environment value


def _texts(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConnectError("invalid_argument", f"{what} must be a list of strings")
    if len(value) > _MAX_ENVS or any(len(v) > _MAX_TEXT or "\0" in v for v in value):
        raise ConnectError("invalid_argument", f"{what}: too many or too long")
    return value


def _envs(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > _MAX_ENVS:
        raise ConnectError("invalid_argument", "envs must be a map of strings")
    for key, item in value.items():
        valid_key = isinstance(key, str) and key and "=" not in key and "\0" not in key
        if not valid_key or not isinstance(item, str) or len(item) > _MAX_TEXT or "\0" in item:
            raise ConnectError("invalid_argument", f"envs: {key!r} is not a usable variable")
    return dict(value)


def _pid(message: dict[str, Any]) -> int:
    selector = message.get("process")
    pid = selector.get("pid") if isinstance(selector, dict) else None
    if not isinstance(pid, int):
        raise ConnectError("invalid_argument", "select the process by pid")
    return pid


async def _sandbox(request: Request) -> Sandbox:
    return service_of(request).sandbox_for_envd(request, request.scope["corral.e2b.sandbox"])


async def start(request: Request) -> Response:
    sandbox = await _sandbox(request)
    try:
        deadline = deadline_of(request)
        message = await read_message(request)
        process, events = await _start(sandbox, message, deadline)
    except ConnectError as exc:
        return exc.response()
    return ConnectStream(_attached(process, events), deadline)


async def connect(request: Request) -> Response:
    """Attach to a running process again: its output from now on, then its end."""
    sandbox = await _sandbox(request)
    try:
        deadline = deadline_of(request)
        process = _running(sandbox, await read_message(request))
        events = process.attach()
    except ConnectError as exc:
        return exc.response()
    except TooManyAttached as exc:
        return ConnectError("resource_exhausted", str(exc)).response()
    return ConnectStream(_attached(process, events), deadline)


def _attached(
    process: Process, events: MemoryObjectReceiveStream[Event]
) -> Callable[[Emit], Awaitable[None]]:
    async def produce(emit: Emit) -> None:
        # Leaving (the client went away, the stream's deadline) detaches; the process runs on.
        async with events:
            await emit({"event": {"start": {"pid": process.pid}}})
            async for event in events:
                await emit(event)
        if process.end is None:
            raise ConnectError("unavailable", "the sandbox ended while the command ran")
        await emit(process.end)

    return produce


async def _start(
    sandbox: Sandbox, message: dict[str, Any], lifetime: float | None
) -> tuple[Process, MemoryObjectReceiveStream[Event]]:
    config = message.get("process")
    if not isinstance(config, dict) or not isinstance(config.get("cmd"), str):
        raise ConnectError("invalid_argument", "process.cmd is required")
    cmd = config["cmd"]
    args = _texts(config.get("args"), "args")
    envs = _envs(config.get("envs"))
    cwd = config.get("cwd") or HOME
    if not isinstance(cwd, str) or not cwd.startswith("/") or "\0" in cwd:
        raise ConnectError("invalid_argument", "cwd must be an absolute path")
    tag = message.get("tag") if isinstance(message.get("tag"), str) else None
    env = {"HOME": HOME, "USER": SANDBOX_USER, **sandbox.env_vars, **envs}
    terminal = message.get("pty") is not None
    argv = pty_argv(message["pty"], [cmd, *args]) if terminal else [cmd, *args]
    try:
        command = await sandbox.session.start_command(argv, env, cwd, cpu_seconds=MAX_TIMEOUT)
    except SessionClosed:
        raise ConnectError("unavailable", f"The sandbox {sandbox.id} was not found") from None
    except WorkerError as exc:
        raise ConnectError("resource_exhausted", f"the command did not start: {exc}") from None
    if not message.get("stdin") and not terminal:
        command.close_stdin()
    process = Process(command, cmd, args, envs, cwd, tag, pty=terminal)
    events = process.attach()  # before its output is read: the Start stream misses nothing

    def ended(done: Process) -> None:
        if sandbox.commands.get(done.pid) is done:
            del sandbox.commands[done.pid]

    try:
        sandbox.session.background(lambda: process.follow(lifetime, ended))
    except CorralError:
        events.close()
        process.release()
        raise ConnectError("unavailable", f"The sandbox {sandbox.id} was not found") from None
    sandbox.commands[command.pid] = process
    return process, events


async def list_processes(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    processes = []
    for pid, running in sandbox.commands.items():
        config = {
            "cmd": running.cmd,
            "args": running.args,
            "envs": running.envs,
            "cwd": running.cwd,
        }
        info: dict[str, Any] = {"config": config, "pid": pid}
        if running.tag is not None:
            info["tag"] = running.tag
        processes.append(info)
    return {"processes": processes}


def _running(sandbox: Sandbox, message: dict[str, Any]) -> Process:
    pid = _pid(message)
    running = sandbox.commands.get(pid)
    if running is None:
        raise ConnectError("not_found", f"process with pid {pid} not found")
    return running


async def send_signal(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    running = _running(sandbox, message)
    signum = _SIGNALS.get(str(message.get("signal")))
    if signum is None:
        raise ConnectError("invalid_argument", "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM")
    running.command.send_signal(signum)
    return {}


def _stdin_of(given: Any, process: Process) -> bytes:
    """The bytes ``input`` carries for ``process``: its ``pty`` (framed for the terminal's
    helper) where it runs on one, else its ``stdin``."""
    field = "pty" if process.pty else "stdin"
    data = given.get(field) if isinstance(given, dict) else None
    if not isinstance(data, str):
        raise ConnectError("invalid_argument", f"input.{field} is required")
    try:
        raw = base64.b64decode(data, validate=True)
    except binascii.Error:
        raise ConnectError("invalid_argument", f"input.{field} is not base64") from None
    return input_frame(raw) if process.pty else raw


async def send_input(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    running = _running(sandbox, message)
    await _write_stdin(running, _stdin_of(message.get("input"), running))
    return {}


async def update(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    """``Update``: a terminal's new size (the only update envd makes)."""
    running = _running(sandbox, message)
    if not running.pty:
        raise ConnectError("invalid_argument", f"process {running.pid} has no pty to resize")
    await _write_stdin(running, resize_of(message))
    return {}


async def stream_input(request: Request) -> Response:
    """A client stream: ``start`` names the process, then ``data`` events go to its stdin in
    order (``keepalive`` events carry nothing)."""
    sandbox = await _sandbox(request)
    process: Process | None = None
    try:
        with _bounded(request):
            async for message in read_stream(request):
                if process is None:
                    start = message.get("start")
                    if not isinstance(start, dict):
                        raise ConnectError("invalid_argument", "the stream must begin with start")
                    process = _running(sandbox, start)
                elif isinstance(data := message.get("data"), dict):
                    await _write_stdin(process, _stdin_of(data.get("input"), process))
            if process is None:
                raise ConnectError("invalid_argument", "the stream must begin with start")
    except ConnectError as exc:
        return stream_answer(None, exc)
    except ClientDisconnect:
        return stream_answer(None, ConnectError("canceled", "the client went away"))
    return stream_answer({})


@contextlib.contextmanager
def _bounded(request: Request) -> Iterator[None]:
    """The request's ``Connect-Timeout-Ms`` around a call that may wait on a process (its
    stdin full): past it, ``deadline_exceeded``.

    Raises:
        ConnectError: the deadline passed, or the header is not a number of milliseconds.
    """
    seconds = deadline_of(request)
    with anyio.move_on_after(math.inf if seconds is None else seconds) as scope:
        yield
    if scope.cancelled_caught:
        raise ConnectError("deadline_exceeded", "the deadline passed")


async def _write_stdin(process: Process, data: bytes) -> None:
    try:
        await process.command.write_stdin(data)
    except (OSError, anyio.ClosedResourceError):
        raise ConnectError("failed_precondition", "the process's stdin is closed") from None


async def close_stdin(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    _running(sandbox, message).command.close_stdin()
    return {}


_UNARY = {
    "List": list_processes,
    "SendSignal": send_signal,
    "SendInput": send_input,
    "CloseStdin": close_stdin,
    "Update": update,
}


async def dispatch(request: Request) -> Response:
    method = request.path_params["method"]
    if method == "Start":
        return await start(request)
    if method == "Connect":
        return await connect(request)
    if method == "StreamInput":
        return await stream_input(request)
    sandbox = await _sandbox(request)
    handler = _UNARY.get(method)
    if handler is None:
        return ConnectError("unimplemented", f"process.Process/{method} is not served").response()
    try:
        with _bounded(request):
            answer = await handler(sandbox, await read_message(request))
    except ConnectError as exc:
        return exc.response()
    return unary(answer)


routes = [Route("/process.Process/{method}", dispatch, methods=["POST"])]

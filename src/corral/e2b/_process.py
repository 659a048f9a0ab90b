"""envd's ``process.Process`` service: Start (streamed), List, SendSignal, SendInput, CloseStdin.

Commands run inside the sandbox, beside its interpreter (``Session.start_command``): the same
namespaces, files, seccomp policy and limits, ``/home/user`` as the working folder, and the
sandbox's ``envVars`` in their environment (never the server's). A command whose stream the
client closes, or whose deadline passes, is killed. Reconnecting to a command (``Connect``),
``StreamInput``, ``Update`` and PTYs are not served (``unimplemented``).
"""

from __future__ import annotations

import base64
import binascii
import signal
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from corral.e2b._connect import ConnectError, ConnectStream, Emit, deadline_of, read_message, unary
from corral.e2b._contexts import HOME
from corral.e2b._sandboxes import MAX_TIMEOUT, RunningCommand, Sandbox
from corral.e2b._service import service_of
from corral.errors import SessionClosed, WorkerError

__all__ = ["routes"]

_SIGNALS = {"SIGNAL_SIGKILL": signal.SIGKILL, "SIGNAL_SIGTERM": signal.SIGTERM}
_MAX_ENVS = 256
_MAX_TEXT = 128 * 1024  # characters of one argument or environment value
_BUFFERED_CHUNKS = 16  # output chunks (64 KiB each at most) waiting for the client


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
        message = await read_message(request)
        running = await _start(sandbox, message)
    except ConnectError as exc:
        return exc.response()
    deadline = deadline_of(request)

    async def produce(emit: Emit) -> None:
        try:
            await _follow(sandbox, running, emit)
        finally:
            running.command.close()
            sandbox.commands.pop(running.command.pid, None)

    return ConnectStream(produce, deadline)


async def _start(sandbox: Sandbox, message: dict[str, Any]) -> RunningCommand:
    if message.get("pty") is not None:
        raise ConnectError("unimplemented", "PTYs are not served")
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
    env = {"HOME": HOME, "USER": "user", **sandbox.env_vars, **envs}
    try:
        command = await sandbox.session.start_command(
            [cmd, *args], env, cwd, cpu_seconds=MAX_TIMEOUT
        )
    except SessionClosed:
        raise ConnectError("unavailable", f"The sandbox {sandbox.id} was not found") from None
    except WorkerError as exc:
        raise ConnectError("resource_exhausted", f"the command did not start: {exc}") from None
    if not message.get("stdin"):
        command.close_stdin()
    running = RunningCommand(command, cmd, args, envs, cwd, tag)
    sandbox.commands[command.pid] = running
    return running


async def _follow(sandbox: Sandbox, running: RunningCommand, emit: Emit) -> None:
    command = running.command
    await emit({"event": {"start": {"pid": command.pid}}})
    # A bounded buffer: a command that prints faster than the client reads waits on its pipe.
    sender, chunks = anyio.create_memory_object_stream[tuple[str, bytes]](_BUFFERED_CHUNKS)

    async def pump(stream: str, out: MemoryObjectSendStream[tuple[str, bytes]]) -> None:
        async with out:
            while chunk := await command.read(stream):
                await out.send((stream, chunk))

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump, "stdout", sender.clone())
        tg.start_soon(pump, "stderr", sender.clone())
        sender.close()
        async with chunks:
            async for stream, chunk in chunks:
                await emit({"event": {"data": {stream: base64.b64encode(chunk).decode()}}})
    try:
        code = await command.wait()
    except WorkerError:
        raise ConnectError("unavailable", "the sandbox ended while the command ran") from None
    status = f"exit status {code}" if code >= 0 else f"signal: {signal.Signals(-code).name}"
    end = {"exitCode": code if code >= 0 else -1, "exited": code >= 0, "status": status}
    await emit({"event": {"end": end}})


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


def _running(sandbox: Sandbox, message: dict[str, Any]) -> RunningCommand:
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


async def send_input(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    running = _running(sandbox, message)
    given = message.get("input")
    data = given.get("stdin") if isinstance(given, dict) else None
    if not isinstance(data, str):
        raise ConnectError("invalid_argument", "input.stdin is required")
    try:
        raw = base64.b64decode(data, validate=True)
    except binascii.Error:
        raise ConnectError("invalid_argument", "input.stdin is not base64") from None
    try:
        await running.command.write_stdin(raw)
    except OSError:
        raise ConnectError("failed_precondition", "the process's stdin is closed") from None
    return {}


async def close_stdin(sandbox: Sandbox, message: dict[str, Any]) -> dict[str, Any]:
    _running(sandbox, message).command.close_stdin()
    return {}


_UNARY = {
    "List": list_processes,
    "SendSignal": send_signal,
    "SendInput": send_input,
    "CloseStdin": close_stdin,
}


async def dispatch(request: Request) -> Response:
    method = request.path_params["method"]
    if method == "Start":
        return await start(request)
    sandbox = await _sandbox(request)
    handler = _UNARY.get(method)
    if handler is None:
        return ConnectError("unimplemented", f"process.Process/{method} is not served").response()
    try:
        return unary(await handler(sandbox, await read_message(request)))
    except ConnectError as exc:
        return exc.response()


routes = [Route("/process.Process/{method}", dispatch, methods=["POST"])]

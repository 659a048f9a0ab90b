"""How the sandbox's in-process twin runs code: what a handler is given and gives back, and
the default handler, the real cell semantics in this process (see ``corral.sandbox._twin``).

A cell is lent the process's state a worker's interpreter has of its own, and it is put back
after the cell: the working folder, stdin, stdout and stderr, ``__main__`` (the worker's
module, whose globals persist between a session's runs), the display wiring
(``display()``, IPython's display functions, pyplot's ``show`` and figures as ``image/png``)
and Python's default warning filters (a test process's may turn warnings into errors). What
is the process's alone stays shared: imported modules, the environment, threads the code
starts. A zygote's preload set (numpy, pandas, matplotlib on the Agg backend) is imported
into this process once, as the zygote imports it.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import io
import os
import socket
import sys
import types
import warnings
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio

from corral.sandbox._protocol import ErrorReport, RunRequest
from corral.sandbox.inside._cell import Display, execute_cell, install_display
from corral.sandbox.inside._fitting import DisplaySender

__all__ = ["Handler", "TwinIO", "TwinReply", "new_main", "preload", "run_in_process", "write_all"]

_UNSET = object()


@dataclass(frozen=True, slots=True)
class TwinReply:
    """What the code ended with: a MIME bundle for its trailing expression, or an error."""

    result: dict[str, Any] | None = None
    error: ErrorReport | None = None
    exit_code: int | None = None
    crashed: bool = False
    """The process dies instead of reporting (as on ``os._exit`` or a kill): the engine sees
    its worker end mid-run."""


class TwinIO:
    """What a handler may do while its code "runs": write output, publish display bundles,
    and find its request and its folders."""

    def __init__(
        self,
        out_fd: int,
        err_fd: int,
        sock: socket.socket,
        request: RunRequest,
        main: types.ModuleType,
        cwd: str,
        inputs: str | None,
    ) -> None:
        self._out, self._err, self._sock = out_fd, err_fd, sock
        self.request = request
        self.main = main
        """The worker's ``__main__``, lent to the process while its cell runs."""
        self.namespace: dict[str, Any] = main.__dict__
        """Persists between a session's runs, as an interpreter's globals do."""
        self.cwd = cwd
        """The working folder: a one-shot worker's own, or the session's data folder."""
        self.inputs = inputs
        """Where the engine wrote the run's inputs (a one-shot worker's), or None."""
        self._frames: list[bytes] = []
        limits = request.limits
        self.sender = DisplaySender()
        self.sender.reset(
            self._frames.append,
            max_items=limits.max_display,
            max_bytes=limits.display_bytes,
            ceiling=limits.output_chars,
        )

    async def stdout(self, text: str) -> None:
        await write_all(self._out, text.encode())

    async def stderr(self, text: str) -> None:
        await write_all(self._err, text.encode())

    async def display(self, bundle: dict[str, Any]) -> None:
        self.sender(bundle)
        await self.send_pending()

    async def send_pending(self) -> None:
        frames, self._frames[:] = list(self._frames), []
        for frame in frames:
            await write_all(self._sock.fileno(), frame)


Handler = Callable[[RunRequest, TwinIO], Awaitable[TwinReply]]
"""What a twin's code does with a request."""


def new_main() -> types.ModuleType:
    """A worker's own ``__main__``, as a fresh interpreter has it."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    return main


@contextlib.contextmanager
def _lent_main(main: types.ModuleType) -> Iterator[None]:
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = main
    try:
        yield
    finally:
        sys.modules["__main__"] = saved


@contextlib.contextmanager
def _in_folder(folder: str, stdin: bytes | None) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """The process's cwd, stdio and stdin lent to one cell (the loop runs nothing else)."""
    out, err = io.StringIO(), io.StringIO()
    previous, saved_stdin = os.getcwd(), sys.stdin
    os.chdir(folder)
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        sys.stdin = saved_stdin
        os.chdir(previous)


@contextlib.contextmanager
def _worker_display(display: Display) -> Iterator[None]:
    """A worker's display wiring (``install_display``) for one cell; this process's own
    ``display``, IPython's display functions and pyplot's ``show`` are put back after it."""
    import IPython.core.display_functions
    import IPython.display

    wired: list[tuple[Any, str]] = [
        (builtins, "display"),
        (IPython.display, "display"),
        (IPython.core.display_functions, "display"),
    ]
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        wired.append((pyplot, "show"))
    saved = [(owner, name, getattr(owner, name, _UNSET)) for owner, name in wired]
    install_display(display)
    try:
        yield
    finally:
        for owner, name, value in saved:
            if value is _UNSET:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


_IGNORED_BY_DEFAULT = (
    DeprecationWarning,
    PendingDeprecationWarning,
    ImportWarning,
    ResourceWarning,
)


@contextlib.contextmanager
def _interpreter_warnings() -> Iterator[None]:
    """Python's default warning filters, as a worker's interpreter has them, for one cell."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        for category in _IGNORED_BY_DEFAULT:
            warnings.simplefilter("ignore", category)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        warnings.showwarning = _show_on_stderr  # a test runner may record them instead
        yield


def _show_on_stderr(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def preload(modules: tuple[str, ...]) -> None:
    """Import what a zygote preloads into this process (once: imports are cached)."""
    for name in modules:
        if name == "matplotlib" and "matplotlib.pyplot" not in sys.modules:
            import matplotlib

            matplotlib.use("Agg")  # a worker's backend (MPLBACKEND=Agg in the sandbox)
            importlib.import_module("matplotlib.pyplot")
        importlib.import_module(name)


async def run_in_process(request: RunRequest, io_: TwinIO) -> TwinReply:
    """The default handler: the real cell semantics, in this process, without isolation."""
    display = Display()
    display.sink = io_.sender
    _write_files(io_.cwd, request.files)
    if io_.inputs is not None:
        io_.namespace["input_files"] = {
            item.id: os.path.join(io_.inputs, f"{item.id}.txt") for item in request.inputs
        }

    def on_error(text: str) -> None:
        err.write(text)

    with (
        _lent_main(io_.main),
        _worker_display(display),
        _interpreter_warnings(),
        _in_folder(io_.cwd, request.stdin) as (out, err),
    ):
        cell = execute_cell(request.code, io_.namespace, display, on_error)
    await io_.stdout(out.getvalue())
    await io_.stderr(err.getvalue())
    await io_.send_pending()
    error = None
    if cell.error is not None:
        error = ErrorReport(cell.error["type"], cell.error["message"], cell.error["traceback"])
    result = cell.result if isinstance(cell.result, dict) else None
    return TwinReply(result=result, error=error, exit_code=cell.exit_code)


def _write_files(cwd: str, files: tuple[tuple[str, bytes], ...]) -> None:
    for path, content in files:  # a few small files a test gives (blocking is fine here)
        target = os.path.join(cwd, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(content)


async def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await anyio.wait_writable(fd)

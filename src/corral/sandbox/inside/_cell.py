"""Jupyter-style cell semantics inside a worker.

The value of a trailing expression becomes ``result``; ``display()`` (ours, and IPython's,
which is routed here) appends to ``display``; matplotlib figures shown or left open become
``image/png`` entries. MIME rendering is IPython's ``DisplayFormatter``; this module only
decides when to call it and bounds what it keeps.
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import importlib.machinery
import io
import linecache
import os
import sys
import traceback
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from corral._mime import IMAGE_PNG
from corral.sandbox.inside import _shell

if TYPE_CHECKING:
    import importlib.abc

__all__ = [
    "Cell",
    "CellOutput",
    "Display",
    "compile_cell",
    "execute_cell",
    "install_display",
    "no_input",
    "prepare_script",
]

CELL_FILENAME = "<cell>"
_CORRAL_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
"""corral's package folder (this is corral/sandbox/inside/_cell.py): frames from files under
it are corral's, never shown in a user's traceback."""


class Display:
    """Collects display bundles up to a count and byte bound."""

    def __init__(self) -> None:
        self.formatter: Any = None
        """IPython's DisplayFormatter; None until ``install_display`` loads it."""
        self.load_formatter: Callable[[], None] | None = None
        """Loads the formatter on first use, when ``install_display`` was told to wait."""
        self.bundles: list[dict[str, Any]] = []
        self.omitted = 0
        self.max_items = 16
        self.max_bytes = 8 * 1024 * 1024
        self._bytes = 0
        # Set by the runner: each bundle is fitted and sent as it is published, not kept.
        self.sink: Callable[[dict[str, Any]], None] | None = None

    def reset(self, max_items: int, max_bytes: int) -> None:
        self.bundles = []
        self.omitted = 0
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._bytes = 0

    def bundle(self, obj: Any, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        if self.formatter is None and self.load_formatter is not None:
            self.load_formatter()
        data, _metadata = self.formatter.format(obj, include=include, exclude=exclude)
        return {mime: _jsonable(value) for mime, value in data.items()}

    def publish(self, data: dict[str, Any]) -> None:
        if self.sink is not None:
            self.sink(data)
            return
        size = sum(len(v) if isinstance(v, str) else len(repr(v)) for v in data.values())
        if len(self.bundles) >= self.max_items or self._bytes + size > self.max_bytes:
            self.omitted += 1
            return
        self._bytes += size
        self.bundles.append(data)

    def __call__(
        self,
        *objs: Any,
        include: Any = None,
        exclude: Any = None,
        raw: bool = False,
        **_ignored: Any,
    ) -> None:
        for obj in objs:
            if raw and isinstance(obj, dict):
                self.publish({k: _jsonable(v) for k, v in obj.items()})
            else:
                self.publish(self.bundle(obj, include, exclude))


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    return value


def _figure_png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def install_display(display: Display, *, load_now: bool = True) -> None:
    """Wire IPython's formatter, IPython's display() and matplotlib's show() to ``display``.

    With ``load_now`` False (a zygote that serves one run), IPython, the costliest import of
    a standard-library run, is imported only when a value is first formatted or when the code
    imports IPython's display functions itself, which are then routed here all the same.
    """
    builtins.display = display  # type: ignore[attr-defined]
    if load_now:
        _load_formatter(display)
        return
    hook = _RouteOnImport(display)

    def load() -> None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(hook)
        display.load_formatter = None
        _load_formatter(display)

    display.load_formatter = load
    sys.meta_path.insert(0, hook)


def _load_formatter(display: Display) -> None:
    from IPython.core.formatters import DisplayFormatter

    display.formatter = DisplayFormatter()
    try:
        import IPython.core.display_functions as display_functions
        import IPython.display as ipython_display

        display_functions.display = display
        ipython_display.display = display
    except ImportError:
        pass
    if "matplotlib" in sys.modules:
        import matplotlib.pyplot as plt
        from matplotlib.figure import Figure

        display.formatter.formatters[IMAGE_PNG].for_type(Figure, _figure_png)

        def show(*_args: Any, **_kwargs: Any) -> None:
            flush_figures(display)

        plt.show = show


class _RouteOnImport:
    """Until the formatter is loaded: code that imports IPython's display functions gets
    them routed to ``display``, as when the zygote loaded them up front."""

    _ROUTED = frozenset({"IPython.core.display_functions", "IPython.display"})

    def __init__(self, display: Display) -> None:
        self._display = display

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in self._ROUTED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = cast("importlib.abc.Loader", _Routing(spec.loader, self._display))
        return spec


class _Routing:
    """The module's own loader, then ``display`` in place of IPython's (importlib.abc is not
    imported for base classes: it costs the zygote more than this module)."""

    def __init__(self, loader: importlib.abc.Loader, display: Display) -> None:
        self._loader = loader
        self._display = display

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        module.display = self._display  # type: ignore[attr-defined]


def flush_figures(display: Display) -> None:
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for number in plt.get_fignums():
        display(plt.figure(number))
    plt.close("all")


def no_input(prompt: object = "") -> str:
    """``input()`` in a worker: there is nobody to answer."""
    raise EOFError("input() is not available: the program has no stdin")


def prepare_script(namespace: dict[str, Any], argv: object, cwd: str) -> str:
    """Set ``sys.argv`` (and ``__file__`` for a script) as ``python`` would; return the name
    tracebacks give the code.

    ``argv`` is ``["-c"]`` for inline code, ``["-"]`` for standard input, ``[FILE, *args]``
    for a script; ``__file__`` is the script's name in the working folder, where a script
    finds files beside it.
    """
    args = [a for a in argv if isinstance(a, str)] if isinstance(argv, list | tuple) else []
    if not args or not args[0]:
        args = ["-c"]
    sys.argv = args
    if args[0] in ("-c", "-"):
        namespace.pop("__file__", None)
        return CELL_FILENAME
    namespace["__file__"] = os.path.join(cwd, os.path.basename(args[0]))
    return args[0]


class CellOutput:
    __slots__ = ("error", "exit_code", "result")

    def __init__(self) -> None:
        self.result: dict[str, Any] | str = ""
        self.error: dict[str, str] | None = None
        self.exit_code: int | None = None
        """Set when the code raised SystemExit, as the interpreter would exit."""


Cell = tuple[types.CodeType, types.CodeType | None]
"""A compiled cell: its body, and its trailing expression (None when there is none)."""


def compile_cell(
    tree: ast.Module,
    code: str,
    filename: str = CELL_FILENAME,
    *,
    skip: frozenset[int] = frozenset(),
) -> Cell:
    """Compile a cell once, for many runs (a batch's cases), from ``tree`` (``code`` parsed,
    which this changes), its top-level statements at the indices in ``skip`` (run already)
    as ``pass``; the rest keep their line numbers.

    Raises:
        SyntaxError, ValueError: as ``compile`` does; ``execute_cell`` reports those.
    """
    # Run already, they become ``pass``: removing them would let a later ``from __future__``
    # or string literal become the first statement, which a fresh run does not see.
    for index in skip:
        tree.body[index] = ast.copy_location(ast.Pass(), tree.body[index])
    return _compile_tree(tree, code, filename)


def _split(code: str, filename: str, namespace: dict[str, Any]) -> Cell:
    try:
        tree = ast.parse(code, filename, "exec")
    except SyntaxError:
        rewritten = _shell.rewrite(code)  # notebook syntax: ``!pip install``, ``%cd``
        if rewritten is None:
            raise
        code, tree = rewritten, ast.parse(rewritten, filename, "exec")
        if not isinstance(namespace.get(_shell.SHELL_NAME), _shell.Shell):
            namespace[_shell.SHELL_NAME] = _shell.Shell(namespace)
    return _compile_tree(tree, code, filename)


def _compile_tree(tree: ast.Module, code: str, filename: str) -> Cell:
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    last: types.CodeType | None = None
    final = tree.body[-1] if tree.body else None
    if isinstance(final, ast.Expr) and not code.rstrip().endswith(";"):
        tree.body.pop()
        last = compile(ast.Expression(final.value), filename, "eval", flags=flags)
    return compile(tree, filename, "exec", flags=flags), last


def _run(code: types.CodeType, namespace: dict[str, Any]) -> Any:
    # eval also runs "exec" code objects, and returns the coroutine of top-level await.
    value = eval(code, namespace)  # noqa: S307
    if isinstance(value, types.CoroutineType):
        import asyncio

        return asyncio.run(value)
    return value


def _drop_corral_frames(te: traceback.TracebackException, seen: set[int]) -> None:
    """Remove corral's own frames from ``te`` and every exception chained to it."""
    if id(te) in seen:
        return
    seen.add(id(te))
    kept = [frame for frame in te.stack if not frame.filename.startswith(_CORRAL_DIR)]
    te.stack = traceback.StackSummary.from_list(kept)
    for chained in (te.__cause__, te.__context__):
        if chained is not None:
            _drop_corral_frames(chained, seen)


def _user_traceback(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return "".join(traceback.format_exception_only(type(exc), exc))
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
    _drop_corral_frames(te, set())
    return "".join(te.format())


def _exit(out: CellOutput, exc: SystemExit, on_error: Callable[[str], None]) -> None:
    """What ``python FILE`` does on SystemExit: 0 is success, a number is the exit status
    (nothing printed), anything else is printed and exits 1."""
    code = exc.code
    if code is None or (isinstance(code, int) and not isinstance(code, bool) and code == 0):
        out.exit_code = 0
        return
    if isinstance(code, int):
        out.exit_code = int(code)
        message = str(out.exit_code)
    else:
        out.exit_code = 1
        message = str(code)
        on_error(message + "\n")
    out.error = {"type": "SystemExit", "message": message, "traceback": ""}


def execute_cell(
    code: str,
    namespace: dict[str, Any],
    display: Display,
    on_error: Callable[[str], None],
    filename: str = CELL_FILENAME,
    cell: Cell | None = None,
    prelude: Callable[[], None] | None = None,
) -> CellOutput:
    """Run one cell in ``namespace``; exceptions become ``CellOutput.error``.

    ``filename`` names the code in tracebacks (a script's path, or ``<cell>``); ``cell`` is
    the code compiled already (by ``compile_cell`` with the same name), if it was;
    ``prelude`` is called just before the code runs.
    """
    out = CellOutput()
    lines = code.splitlines(keepends=True)
    linecache.cache[filename] = (len(code), None, lines, filename)
    try:
        body, last = _split(code, filename, namespace) if cell is None else cell
        if prelude is not None:
            prelude()
        _run(body, namespace)
        if last is not None:
            value = _run(last, namespace)
            if value is not None:
                namespace["_"] = value
                out.result = display.bundle(value)
    except SystemExit as exc:
        _exit(out, exc, on_error)
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything
        text = _user_traceback(exc)
        on_error(text)
        out.error = {"type": type(exc).__name__, "message": str(exc), "traceback": text}
    finally:
        try:
            flush_figures(display)
        except Exception as exc:  # noqa: BLE001 - a broken figure must not hide the result
            on_error(f"could not render figures: {type(exc).__name__}: {exc}\n")
    return out

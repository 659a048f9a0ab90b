"""Jupyter-compatible cell semantics, observed through real workers."""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral._limits import Limits
from corral.engine import Engine
from corral.errors import FileNotReturned

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

LIMITS = Limits(timeout=10)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png(bundle: dict[str, str]) -> bytes:
    data = base64.b64decode(bundle["image/png"], validate=True)
    assert data.startswith(PNG_MAGIC)
    return data


async def test_trailing_expression_becomes_the_result(engine: Engine) -> None:
    result = await engine.run("x = 1\nx + 2", limits=LIMITS)
    assert result.outcome == "ok"
    assert result.result == {"text/plain": "3"}
    assert result.stdout == ""


async def test_statement_or_semicolon_gives_no_result(engine: Engine) -> None:
    for code in ("x = 3", "3;", "None", "print('a')"):
        result = await engine.run(code, limits=LIMITS)
        assert result.outcome == "ok", (code, result.stderr)
        assert result.result == "", code


async def test_dataframe_result_has_plain_text_and_html(engine: Engine) -> None:
    result = await engine.run("import pandas as pd\npd.DataFrame({'a': [9, 7.5]})", limits=LIMITS)
    assert result.outcome == "ok", result.stderr
    assert result.result != ""
    assert "7.5" in result.result["text/plain"]
    assert "<table" in result.result["text/html"]


async def test_display_appends_in_order(engine: Engine) -> None:
    result = await engine.run(
        "display('first')\n"
        "import IPython.display\n"
        "IPython.display.display(IPython.display.HTML('<b>second</b>'))\n"
        "from IPython.display import display as ipython_display\n"
        "ipython_display(3)\n"
        "'last'",
        limits=LIMITS,
    )
    assert result.outcome == "ok", result.stderr
    assert [d.get("text/plain") for d in result.display][0::2] == ["'first'", "3"]
    assert result.display[1]["text/html"] == "<b>second</b>"
    assert len(result.display) == 3
    assert result.result == {"text/plain": "'last'"}


async def test_open_matplotlib_figure_becomes_a_png(engine: Engine) -> None:
    result = await engine.run(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.title('left open')",
        limits=LIMITS,
    )
    assert result.outcome == "ok", result.stderr
    assert len(result.display) == 1
    _png(result.display[0])


async def test_plt_show_displays_each_figure_once(engine: Engine) -> None:
    result = await engine.run(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2])\nplt.show()\n"
        "plt.figure(); plt.bar(['a', 'b'], [1, 2]); plt.show()\n"
        "print(len(plt.get_fignums()))",
        limits=LIMITS,
    )
    assert result.outcome == "ok", result.stderr
    assert result.stdout == "0\n"  # show() closed them, so nothing is rendered twice
    pngs = [_png(d) for d in result.display]
    assert len(pngs) == 2
    assert pngs[0] != pngs[1]


async def test_output_from_c_code_os_system_and_subprocesses_is_kept(engine: Engine) -> None:
    result = await engine.run(
        "import os, subprocess, sys\n"
        "print('python', flush=True)\n"
        "os.write(1, b'fd-level\\n')\n"
        "os.system('echo from-system; echo to-stderr >&2')\n"
        "subprocess.run(['echo', 'from-subprocess'], check=True)\n"
        "import ctypes\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.puts(b'from-libc'); libc.fflush(None)\n"
        "sys.stderr.write('python-stderr\\n')",
        limits=LIMITS,
    )
    assert result.outcome == "ok", result.stderr
    assert result.stdout.splitlines() == [
        "python",
        "fd-level",
        "from-system",
        "from-subprocess",
        "from-libc",
    ]
    assert sorted(result.stderr.splitlines()) == ["python-stderr", "to-stderr"]


async def test_ansi_escapes_are_stripped(engine: Engine) -> None:
    result = await engine.run(
        "import sys\n"
        "print('\\x1b[1;31mred\\x1b[0m plain \\x1b]0;title\\x07done')\n"
        "sys.stderr.write('\\x1b[32mgreen\\x1b[0m\\n')",
        limits=LIMITS,
    )
    assert result.outcome == "ok", result.stderr
    assert result.stdout == "red plain done\n"
    assert result.stderr == "green\n"


async def test_exception_gives_python_error_with_traceback(engine: Engine) -> None:
    result = await engine.run("print('before')\n1 / 0", limits=LIMITS)
    assert result.outcome == "python_error"
    assert result.status == "FAILURE"
    assert result.stdout == "before\n"
    assert result.error is not None
    assert result.error.type == "ZeroDivisionError"
    assert result.error.message == "division by zero"
    assert "Traceback" in result.error.traceback
    assert "ZeroDivisionError: division by zero" in result.stderr
    assert "_cell.py" not in result.stderr  # the runner's own frames are not the user's


async def test_syntax_error_gives_python_error(engine: Engine) -> None:
    result = await engine.run("print('never')\ndef broken(:\n    pass", limits=LIMITS)
    assert result.outcome == "python_error"
    assert result.stdout == ""
    assert result.error is not None
    assert result.error.type == "SyntaxError"
    assert "SyntaxError" in result.stderr
    assert "def broken(:" in result.stderr


async def test_system_exit_is_a_python_error_not_a_crash(engine: Engine) -> None:
    result = await engine.run("import sys\nsys.exit(3)", limits=LIMITS)
    assert result.outcome == "python_error"
    assert result.error is not None
    assert result.error.type == "SystemExit"


async def test_input_fails_at_once(engine: Engine) -> None:
    started = time.perf_counter()
    result = await engine.run("name = input('name? ')\nprint(name)", limits=LIMITS)
    assert time.perf_counter() - started < LIMITS.timeout / 2
    assert result.outcome == "python_error"
    assert result.error is not None
    assert result.error.type == "EOFError"
    result = await engine.run("import sys\nprint(repr(sys.stdin.read()))", limits=LIMITS)
    assert result.outcome == "ok", result.stderr
    assert result.stdout == "''\n"


async def test_files_left_in_work_come_back(engine: Engine) -> None:
    result = await engine.run(
        "import os\n"
        "open('out.csv', 'w').write('a,b\\n1,2\\n')\n"
        "os.makedirs('charts')\n"
        "open('charts/raw.bin', 'wb').write(bytes(range(256)))\n"
        "open('/tmp/scratch.txt', 'w').write('not returned')",
        limits=LIMITS,
    )
    assert result.outcome == "ok", result.stderr
    expected = {"out.csv": b"a,b\n1,2\n", "charts/raw.bin": bytes(range(256))}
    assert sorted(f.path for f in result.files) == sorted(expected)
    for info in result.files:
        data = expected[info.path]
        assert info.size == len(data)
        assert info.sha256 == hashlib.sha256(data).hexdigest()
        assert result.read_file(info.path) == data
    with pytest.raises(FileNotReturned):
        result.read_file("/tmp/scratch.txt")


async def test_file_count_and_returned_bytes_are_bounded(engine: Engine) -> None:
    limits = Limits(timeout=10, max_files=3, max_file_bytes=1000)
    result = await engine.run(
        "for i in range(6):\n    open(f'f{i}.txt', 'w').write('x' * 400)",
        limits=limits,
    )
    assert result.outcome == "ok", result.stderr
    assert len(result.files) == 3
    returned = [f.path for f in result.files if f.path in result.file_contents]
    assert len(returned) == 2  # 2 * 400 bytes fit in 1000, a third would not
    for path in returned:
        assert result.read_file(path) == b"x" * 400


async def test_sys_exit_zero_is_ok_with_exit_code_zero(engine: Engine) -> None:
    for code in ("import sys\nprint('bye')\nsys.exit(0)", "import sys; sys.exit()", "exit()"):
        result = await engine.run(code + "\nprint('not reached')", limits=LIMITS)
        assert (result.outcome, result.exit_code, result.stderr) == ("ok", 0, ""), code
        assert "not reached" not in result.stdout
        assert result.error is None
        assert result.as_dict()["exit_code"] == 0


async def test_sys_exit_with_a_status_is_a_python_error_carrying_it(engine: Engine) -> None:
    result = await engine.run("import sys\nsys.exit(3)", limits=LIMITS)
    assert (result.outcome, result.exit_code) == ("python_error", 3)
    assert result.error is not None
    assert (result.error.type, result.error.message, result.error.traceback) == (
        "SystemExit",
        "3",
        "",
    )
    assert result.stderr == ""  # as python prints nothing for a numeric status
    said = await engine.run("raise SystemExit('cannot go on')", limits=LIMITS)
    assert (said.outcome, said.exit_code, said.stderr) == ("python_error", 1, "cannot go on\n")
    plain = await engine.run("print('done')", limits=LIMITS)
    assert plain.exit_code is None  # sys.exit was never called


async def test_argv_and_file_are_those_of_a_script(engine: Engine) -> None:
    code = "import sys\nsys.argv, globals().get('__file__')"
    inline = await engine.run(code, limits=LIMITS)
    assert inline.result == {"text/plain": "(['-c'], None)"}
    script = await engine.run(code, limits=LIMITS, argv=["report.py", "--year", "2024"])
    assert script.result == {"text/plain": "(['report.py', '--year', '2024'], '/work/report.py')"}
    failing = await engine.run("x = 1\n1 / 0", limits=LIMITS, argv=["report.py"])
    assert failing.error is not None
    assert 'File "report.py", line 2, in <module>' in failing.error.traceback
    bad = await engine.run("1", limits=LIMITS, argv=["x", "nul\x00"])
    assert (bad.outcome, bad.message) == ("invalid_input", "argv contains a NUL character")


async def test_input_fails_in_one_clear_line_without_corral_frames(engine: Engine) -> None:
    result = await engine.run("name = input('name? ')", limits=LIMITS)
    assert result.outcome == "python_error"
    assert result.error is not None
    assert result.error.type == "EOFError"
    assert result.error.message == "input() is not available: the program has no stdin"
    assert result.stderr == (
        "Traceback (most recent call last):\n"
        '  File "<cell>", line 1, in <module>\n'
        "    name = input('name? ')\n"
        "            ^^^^^^^^^^^^^^^\n"
        "EOFError: input() is not available: the program has no stdin\n"
    )
    assert "corral" not in result.stderr


async def test_chained_tracebacks_show_only_user_frames(engine: Engine) -> None:
    code = (
        "def f():\n    try:\n        input()\n"
        "    except EOFError as e:\n        raise ValueError('no') from e\nf()"
    )
    result = await engine.run(code, limits=LIMITS)
    assert result.error is not None
    assert "corral" not in result.error.traceback
    assert "The above exception was the direct cause" in result.error.traceback
    assert 'File "<cell>", line 3, in f' in result.error.traceback


@pytest.fixture(scope="module")
async def one_run_engine() -> AsyncIterator[Engine]:
    """corral run's engine: its zygote imports IPython only when a run first needs it."""
    shape: dict[str, Any] = {"pool_size": 0, "prewarm": False, "lean": False, "preload": ()}
    async with Engine(capacity=1, limits=LIMITS, **shape) as started:
        yield started


RICH = (
    "import sys\n"
    "before = 'IPython' in sys.modules\n"
    "class Rich:\n"
    "    def _repr_html_(self):\n"
    "        return '<b>rich</b>'\n"
    "    def __repr__(self):\n"
    "        return 'Rich()'\n"
    "display(Rich())\n"
    "print(before)\n"
    "Rich()"
)


async def test_a_formatter_loaded_on_first_use_renders_as_a_preloaded_one(
    engine: Engine, one_run_engine: Engine
) -> None:
    preloaded = await engine.run(RICH, limits=LIMITS)
    on_first_use = await one_run_engine.run(RICH, limits=LIMITS)
    assert (preloaded.stdout, on_first_use.stdout) == ("True\n", "False\n")
    bundle = {"text/plain": "Rich()", "text/html": "<b>rich</b>"}
    for result in (preloaded, on_first_use):
        assert result.outcome == "ok", result.stderr
        assert (result.result, result.display) == (bundle, (bundle,))


async def test_ipython_display_imported_before_first_use_is_routed(one_run_engine: Engine) -> None:
    code = (
        "import importlib\n"
        "shown = importlib.import_module('IPython.display')\n"
        "shown.display(shown.HTML('<i>x</i>'))\n"
        "from IPython.core.display_functions import display as same\n"
        "print(same is shown.display is display)"
    )
    result = await one_run_engine.run(code, limits=LIMITS)
    assert (result.outcome, result.stdout) == ("ok", "True\n"), result.stderr
    assert result.display == ({"text/plain": "<IPython.core.display.HTML object>",
                               "text/html": "<i>x</i>"},)  # fmt: skip

"""Notebook shell syntax in cells, through real workers: ``!cmd``, ``x = !cmd``, ``%cd``,
``%%bash``, ``%%writefile``; Python that parses is never rewritten."""

from __future__ import annotations

import pytest

from corral._limits import Limits
from corral.engine import Engine
from corral.sandbox.inside._shell import rewrite

pytestmark = [pytest.mark.anyio]

LIMITS = Limits(timeout=20)


def test_python_that_parses_is_never_rewritten() -> None:
    for code in ("x = 1", "print('!not a command')", "a = {1: 2}\n", "s = '%pip'"):
        assert rewrite(code) is None


def test_a_syntax_error_without_shell_lines_is_left_alone() -> None:
    assert rewrite("print(1") is None
    assert rewrite("!ls\nprint(1") is None  # still not Python once rewritten: show the error


def test_shell_lines_become_ipythons_calls() -> None:
    assert rewrite("!echo hi") == "get_ipython().system('echo hi')\n"
    assert rewrite("%pip install x") == "get_ipython().run_line_magic('pip', 'install x')\n"
    assert rewrite("files = !ls") == "files = get_ipython().getoutput('ls')\n"


@pytest.mark.isolation
async def test_a_shell_line_streams_its_output_into_stdout(engine: Engine) -> None:
    result = await engine.run("!echo one; echo two >&2\nprint('three')", limits=LIMITS)
    assert result.outcome == "ok", result.stderr
    assert result.stdout == "one\ntwo\nthree\n"


@pytest.mark.isolation
async def test_variables_expand_into_commands_and_output_comes_back_as_lines(
    engine: Engine,
) -> None:
    code = (
        "name = 'corral'\n"
        "for i in range(2):\n"
        "    !echo $name {i}\n"
        "lines = !printf 'a\\nb\\n'\n"
        "lines"
    )
    result = await engine.run(code, limits=LIMITS)
    assert result.outcome == "ok", result.stderr
    assert result.stdout == "corral 0\ncorral 1\n"
    assert result.result == {"text/plain": "['a', 'b']"}


@pytest.mark.isolation
async def test_cd_bash_and_writefile_magics(engine: Engine) -> None:
    code = "%cd /tmp\nimport os\nprint(os.getcwd())\n"
    result = await engine.run(code, limits=LIMITS)
    assert result.stdout == "/tmp\n/tmp\n", result.stderr
    bash = await engine.run("%%bash\nfor x in 1 2; do echo $x; done\n", limits=LIMITS)
    assert bash.stdout == "1\n2\n", bash.stderr
    write = await engine.run("%%writefile notes.txt\nhello\n", limits=LIMITS)
    assert write.stdout == "Writing notes.txt\n", write.stderr
    assert [f.path for f in write.files] == ["notes.txt"]


@pytest.mark.isolation
async def test_a_failed_command_is_the_runs_error_and_an_unknown_magic_too(
    engine: Engine,
) -> None:
    result = await engine.run("!echo before; exit 3\nprint('after')", limits=LIMITS)
    assert result.outcome == "python_error"
    assert result.stdout == "before\n"  # the rest of the cell does not run
    assert result.error is not None
    assert result.error.type == "CalledProcessError"
    assert "returned non-zero exit status 3" in result.error.message
    kept = await engine.run("lines = !exit 4\n_exit_code", limits=LIMITS)
    assert kept.result == {"text/plain": "4"}  # captured output is the code's to judge
    unknown = await engine.run("%timeit 1 + 1", limits=LIMITS)
    assert unknown.outcome == "python_error"
    assert unknown.error is not None
    assert unknown.error.type == "UsageError"
    assert "%timeit" in unknown.error.message


@pytest.mark.isolation
async def test_the_interpreters_own_python_and_pip_come_first_on_path(engine: Engine) -> None:
    code = (
        "import os, sys\n"
        "where = !command -v python; command -v pip\n"
        "home = os.path.dirname(sys.executable)\n"
        "print(where == [os.path.join(home, 'python'), os.path.join(home, 'pip')])\n"
        "print(where, sys.executable)"
    )
    result = await engine.run(code, limits=LIMITS)
    assert result.stdout.startswith("True\n"), result.stdout + result.stderr

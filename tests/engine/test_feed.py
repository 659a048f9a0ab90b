"""``Engine.run(stdin=, files=, queue_timeout=)``: what a one-shot run is fed, in real workers;
what is refused before a run starts, on the sandbox's in-process twin."""

from __future__ import annotations

import pytest

from corral.engine import Case, Engine
from corral.engine._feed import MAX_FEED_FILES

pytestmark = pytest.mark.anyio


async def test_stdin_is_fd_0_then_eof(real_engine: Engine) -> None:
    code = "import sys\na = input()\nrest = sys.stdin.read()\nprint(a.upper(), len(rest))"
    result = await real_engine.run(code, stdin=b"first\nsecond\nthird\n")
    assert result.outcome == "ok", result
    assert result.stdout == "FIRST 13\n"
    raw = await real_engine.run("print(len(open(0).read()))", stdin=b"abc")
    assert raw.stdout == "3\n"


async def test_stdin_past_a_pipe_is_spilled_to_a_private_file(real_engine: Engine) -> None:
    data = b"x" * (1 << 20)
    code = "import os, sys\nprint(len(sys.stdin.buffer.read()), os.listdir('/tmp'))"
    result = await real_engine.run(code, stdin=data)
    assert result.stdout.startswith(f"{len(data)} [")
    assert ".corral-stdin" not in result.stdout  # unlinked once open


async def test_no_stdin_is_eof_at_once(real_engine: Engine) -> None:
    result = await real_engine.run("import sys\nprint(repr(sys.stdin.read()))\ninput()")
    assert result.stdout == "''\n"
    assert result.error is not None
    assert result.error.type == "EOFError"


async def test_files_land_in_the_working_folder(real_engine: Engine) -> None:
    code = "import os\nprint(open('a/b.txt').read(), os.getcwd())\nopen('out', 'w').write('o')"
    result = await real_engine.run(code, files={"a/b.txt": b"given", "./c": b""})
    assert result.stdout == "given /work\n"
    assert sorted(f.path for f in result.files) == ["a/b.txt", "c", "out"]
    assert result.read_file("out") == b"o"


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"../escape": b""}, "not allowed"),
        ({"/etc/x": b""}, "absolute"),
        ({f"f{i}": b"" for i in range(MAX_FEED_FILES + 1)}, "at most"),
        ({"big": b"x" * (65 * 1024 * 1024)}, "limit"),
    ],
)
async def test_bad_files_are_invalid_input(
    engine: Engine, files: dict[str, bytes], reason: str
) -> None:
    result = await engine.run("pass", files=files)
    assert result.outcome == "invalid_input"
    assert reason in result.message


async def test_sessions_are_not_fed(real_engine: Engine) -> None:
    session = await real_engine.open_session()
    try:
        result = await session.run("import sys\nprint(repr(sys.stdin.read()))")
    finally:
        await session.close()
    assert result.stdout == "''\n"


async def test_text_for_stdin_is_a_clear_type_error(engine: Engine) -> None:
    with pytest.raises(TypeError, match="stdin must be bytes"):
        await engine.run("print(input())", stdin="text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="stdin must be bytes"):
        await engine.run_case("print(input())", Case(stdin="text"))  # type: ignore[arg-type]

"""The engine/sandbox boundary with real workers: what a worker says is bounded and fitted.

A lying worker (user code writing to the protocol socket itself) costs the server at most the
run's own limits; results that are too big are fitted in the sandbox into ``ok`` results with
exact omission counts; names that are not valid text and very deep trees never crash.
"""

from __future__ import annotations

import resource

import anyio
import pytest

from corral._limits import Limits
from corral.engine import Engine, ExecutionResult, OutputEvent
from corral.engine._fit import marker

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

LIMITS = Limits(timeout=30)
_MIB = 1024 * 1024

_FORGE = """\
import json, os

def send(data):
    view = memoryview(data)
    while view:
        view = view[os.write(3, view):]

def frame(kind, payload):
    return len(payload).to_bytes(4, 'big') + kind + payload

def done(files):
    return frame(b'J', json.dumps({
        't': 'done', 'result': None, 'plain': None, 'error': None, 'display_omitted': 0,
        'files': files, 'files_omitted': 0, 'usage': [0, 0],
    }).encode())

blob = frame(b'B', b'x' * (16 << 20))
"""

ATTACKS = {
    # 32 files of 16 MiB announced: refused from the report, before any content is read.
    "announced": "send(done([[f'f{i}', 16 << 20, '0' * 64, True] for i in range(32)]))\n"
    "for _ in range(32):\n    send(blob)\n",
    # One file within the bound announced, then far more bytes than it said.
    "oversent": "send(done([['f', 4 << 20, '0' * 64, True]]))\n"
    "send(frame(b'B', b'x' * (4 << 20)))\nfor _ in range(32):\n    send(blob)\n",
    # File frames with no report at all.
    "unannounced": "for _ in range(32):\n    send(blob)\n",
    # Display bundles far past the display budget.
    "display": "big = frame(b'J', json.dumps({'t': 'display', 'data': "
    "{'image/png': 'A' * (1 << 20)}}).encode())\nfor _ in range(400):\n    send(big)\n",
}


def _peak_rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_forged_frames_cost_the_server_at_most_the_run_limits(
    real_engine: Engine, attack: str
) -> None:
    limits = LIMITS.replace(max_file_bytes=4 * _MIB, display_bytes=4 * _MIB)
    before = _peak_rss_kb()
    with anyio.fail_after(60):
        result = await real_engine.run(_FORGE + ATTACKS[attack], limits=limits)
    grown_mib = (_peak_rss_kb() - before) / 1024
    assert result.outcome == "worker_error", (result.outcome, result.message)
    # The attacker offered 400-512 MiB; the old reader buffered 432 MiB of it. What the run
    # may return is 4 MiB of files and 4 MiB of display, read at most twice over.
    assert grown_mib < 3 * 4 + 16, f"the server's peak RSS grew by {grown_mib:.0f} MiB"
    healthy = await real_engine.run("print('healthy')", limits=LIMITS)
    assert (healthy.outcome, healthy.stdout) == ("ok", "healthy\n")


def _exactly_fitted(text: str, omitted: int, total: int, ceiling: int) -> None:
    assert omitted > 0
    assert len(text) <= ceiling
    assert marker(omitted) in text
    assert len(text) - len(marker(omitted)) + omitted == total


async def test_a_huge_repr_is_a_fitted_ok_result(real_engine: Engine) -> None:
    result = await real_engine.run("'x' * 19_000_000", limits=LIMITS)
    assert result.outcome == "ok", (result.outcome, result.message)
    assert result.result
    text = result.result["text/plain"]
    _exactly_fitted(text, result.omitted["result"], 19_000_002, LIMITS.output_chars)
    assert text.startswith("'xxx")
    assert text.endswith("xxx'")


async def test_an_html_flood_is_a_fitted_ok_result(real_engine: Engine) -> None:
    code = (
        "from IPython.display import HTML, display\n"
        "page = HTML('<p>' + 'x' * 20_000_000 + '</p>')\n"
        "display(page)\n"
        "page"
    )
    events: list[OutputEvent] = []
    result = await real_engine.run(code, limits=LIMITS, on_output=events.append)
    assert result.outcome == "ok", (result.outcome, result.message)
    shown = {"text/plain": "<IPython.core.display.HTML object>"}
    assert result.result == shown  # the HTML is past the ceiling; its text stays
    assert result.display == (shown,)
    assert [e.data for e in events if e.kind == "display"] == [shown]
    assert result.omitted == {"stdout": 0, "stderr": 0, "result": 0}


async def test_a_huge_error_message_is_fitted(real_engine: Engine) -> None:
    result = await real_engine.run("raise ValueError('m' * 5_000_000)", limits=LIMITS)
    assert result.outcome == "python_error", (result.outcome, result.message)
    assert result.error is not None
    assert result.error.type == "ValueError"
    assert len(result.error.message) <= LIMITS.output_chars
    assert "characters omitted" in result.error.message


async def test_undecodable_and_control_names_are_reported_escaped(real_engine: Engine) -> None:
    code = (
        "open(b'\\xff', 'w').write('ff')\n"
        "open('line\\nbreak', 'w').write('nl')\n"
        "open('\\x1b[31mred', 'w').write('esc')\n"
        "open('fine.txt', 'w').write('ok')\n"
    )
    result = await real_engine.run(code, limits=LIMITS)
    assert result.outcome == "ok", (result.outcome, result.message, result.stderr)
    paths = sorted(f.path for f in result.files)
    assert paths == ["\\x1b[31mred", "\\xff", "fine.txt", "line\\nbreak"]
    assert all(p.isprintable() for p in paths)
    assert result.read_file("\\xff") == b"ff"
    assert result.read_file("line\\nbreak") == b"nl"


async def test_a_deep_tree_is_walked_within_bounds(real_engine: Engine) -> None:
    code = (
        "import os\n"
        "open('top.txt', 'w').write('top')\n"
        "for level in range(2500):\n"
        "    os.mkdir('d')\n"
        "    os.chdir('d')\n"
        "    if level == 99:\n"
        "        open('middle.txt', 'w').write('middle')\n"
        "open('bottom.txt', 'w').write('bottom')\n"
    )
    with anyio.fail_after(60):
        result: ExecutionResult = await real_engine.run(code, limits=LIMITS)
    assert result.outcome == "ok", (result.outcome, result.message, result.stderr[-500:])
    middle = "d/" * 100 + "middle.txt"
    assert [f.path for f in result.files] == ["top.txt", middle]  # the bottom is too deep to name
    assert result.read_file(middle) == b"middle"


async def test_display_streams_while_a_session_run_waits(real_engine: Engine) -> None:
    session = await real_engine.open_session(limits=LIMITS)
    try:
        code = (
            "import os, time\n"
            "display({'text/plain': 'live'}, raw=True)\n"
            "while not os.path.exists('go'):\n"
            "    time.sleep(0.01)\n"
            "'done'"
        )
        seen: list[OutputEvent] = []
        with anyio.fail_after(20):
            async for item in session.stream(code):
                if isinstance(item, OutputEvent):
                    seen.append(item)
                    await session.put_file("go", b"")
                else:
                    result = item
        assert seen == [OutputEvent(kind="display", data={"text/plain": "live"})]
        assert result.outcome == "ok", result.message
        assert result.display == ({"text/plain": "live"},)
    finally:
        await session.close()


async def test_lone_surrogates_from_user_code_are_escaped(real_engine: Engine) -> None:
    code = (
        "class S:\n"
        "    def __repr__(self):\n"
        "        return 'a\\udcffb'\n"
        "display({'text/plain': '\\ud800' * 70_000}, raw=True)\n"
        "S()"
    )
    result = await real_engine.run(code, limits=LIMITS)
    assert result.outcome == "ok", (result.outcome, result.message)
    assert result.result == {"text/plain": "a\\udcffb"}
    (shown,) = result.display
    assert shown["text/plain"].startswith("\\ud800")
    assert len(shown["text/plain"]) <= LIMITS.output_chars
    failed = await real_engine.run("raise ValueError('\\udcff')", limits=LIMITS)
    assert failed.outcome == "python_error", (failed.outcome, failed.message)
    assert failed.error is not None
    assert failed.error.message == "\\udcff"


async def test_a_rich_repr_that_is_not_json_is_dropped(real_engine: Engine) -> None:
    code = (
        "class Odd:\n"
        "    def _repr_json_(self):\n"
        "        return {1, 2}\n"
        "    def __repr__(self):\n"
        "        return 'odd'\n"
        "display(Odd())\n"
        "Odd()"
    )
    result = await real_engine.run(code, limits=LIMITS)
    assert result.outcome == "ok", (result.outcome, result.message, result.stderr[-300:])
    assert result.result == {"text/plain": "odd"}
    assert result.display == ({"text/plain": "odd"},)

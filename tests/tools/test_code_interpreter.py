"""``code_interpreter``: what docs/code-interpreter.md §11 lists.

The tool's logic (schema, budget, fitting, typed results, sources refused before Python,
queueing and cancellation) runs on the sandbox's in-process twin; what the code meets inside
the sandbox (its folders and mounts, figures, escape routes, a worker that will not stop) runs
on real workers (``real_engine``, marked ``isolation``). Each engine has a capacity of one, so
queueing is deterministic.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import pathlib
import secrets
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from corral import Limits
from corral.engine import Engine
from corral.errors import ConfigError
from corral.sources import SourceRegistry
from corral.tools import (
    CODE_INTERPRETER,
    EXPORT_FORMATS,
    CodeInterpreterConfig,
    Invocation,
    ProgressEvent,
    ToolContext,
    ToolRegistry,
    ToolResult,
    code_interpreter_tool,
    export_tools,
    register_code_interpreter,
    source_add_tool,
)
from tests.engine.twinkit import StandIn, standing_in, twin_engine

pytestmark = pytest.mark.anyio

FAST = CodeInterpreterConfig(timeout_ms=10_000)
HERE = str(pathlib.Path(__file__).resolve())
LIMITS = Limits(timeout=10)
HOLD = "import time\ntime.sleep(60)"
"""Occupies the only worker until its call is cancelled; on the twin a stand-in that waits."""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # module scope, so the engines below are started once


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[Engine]:
    handler = standing_in({HOLD: StandIn()})
    async with twin_engine(handler, capacity=1, limits=LIMITS) as started:
        yield started


@pytest.fixture(scope="module")
async def real_engine() -> AsyncIterator[Engine]:
    async with Engine(capacity=1, limits=LIMITS) as started:
        yield started


def admitted(engine: Engine) -> int:
    """Runs the scheduler has let start: unchanged means Python never started."""
    return engine.statistics().scheduler.admitted


class Harness:
    """One invocation with its registry, recording the progress events of both sinks."""

    def __init__(
        self,
        engine: Engine,
        *,
        config: CodeInterpreterConfig = FAST,
        invocation: Invocation | None = None,
    ) -> None:
        self.engine = engine
        self.events: list[ProgressEvent] = []
        """From the invocation's sink."""
        self.context_events: list[dict[str, Any]] = []
        """From the per-call ToolContext sink: the same events, as plain dicts."""
        self.phases: dict[str, anyio.Event] = {}
        self.invocation = invocation or Invocation(max_calls=config.max_calls)
        self.invocation.progress = self._record
        self.registry = ToolRegistry()
        register_code_interpreter(self.registry, engine, self.invocation, config=config)
        self.registry.register(source_add_tool())

    async def run(self, code: str, *source_ids: str, summary: str = "test") -> ToolResult:
        arguments: dict[str, Any] = {"summary": summary, "code": code}
        if source_ids:
            arguments["sourceIds"] = list(source_ids)
        return await self.call(arguments)

    def _record(self, event: ProgressEvent) -> None:
        self.events.append(event)
        self.phase(event["phase"]).set()

    def phase(self, name: str) -> anyio.Event:
        return self.phases.setdefault(name, anyio.Event())

    def phases_seen(self) -> list[str]:
        return [e["phase"] for e in self.events]

    async def call(self, arguments: dict[str, Any], name: str = CODE_INTERPRETER) -> ToolResult:
        context = ToolContext(invocation=self.invocation, progress=self.context_events.append)
        with anyio.fail_after(30):
            return await self.registry.call(name, arguments, context)


@pytest.fixture
def harness(engine: Engine) -> Harness:
    return Harness(engine)


@pytest.fixture
def real_harness(real_engine: Engine) -> Harness:
    return Harness(real_engine)


def outcome(result: ToolResult) -> str:
    assert result.structured is not None
    return str(result.structured["outcome"])


# registration and instructions ---------------------------------------------------------------


async def test_registration_declares_exactly_summary_code_source_ids(engine: Engine) -> None:
    registry = ToolRegistry()
    registry.register(code_interpreter_tool(engine))
    (tool,) = registry.active()
    schema = tool.parameters
    assert set(schema["properties"]) == {"summary", "code", "sourceIds"}
    assert schema["required"] == ["summary", "code"]
    assert schema["additionalProperties"] is False
    ids = schema["properties"]["sourceIds"]
    assert (ids["maxItems"], ids["items"]) == (4, {"type": "string"})
    assert "uniqueItems" not in ids  # repeats are reported as unavailable_source
    assert tool.annotations.read_only_hint is True
    for fmt in EXPORT_FORMATS:
        (declared,) = export_tools(registry.active(), fmt)  # type: ignore[arg-type]
        assert CODE_INTERPRETER in json.dumps(declared)
        assert '"additionalProperties": false' in json.dumps(declared)


async def test_description_carries_the_tool_owned_guidance_and_limits(engine: Engine) -> None:
    text = code_interpreter_tool(engine).description
    assert "whenever the answer creates or transforms structured or machine-readable" in text
    assert "Do not simulate arithmetic or data processing in prose" in text
    assert "no variables, imports or files carry over" in text
    assert "No network, no package installation, no host files" in text
    assert "input_files" in text
    assert "sourceIds" in text
    assert "20000 characters of code, 30 s including queueing, 64000 characters" in text
    assert "Budget: at most 10 calls per run" in text


async def test_the_description_is_stable_and_results_report_the_budget(engine: Engine) -> None:
    harness = Harness(engine, config=CodeInterpreterConfig(max_calls=3, timeout_ms=10_000))
    changes: list[str] = []
    harness.registry.add_listener(lambda: changes.append("changed"))
    before = harness.registry.get(CODE_INTERPRETER).description
    failed = await harness.run("1 / 0")  # a failed call spends the budget too
    assert "2 of 3 code calls left in this run" in failed.text
    assert failed.details["remaining_calls"] == 2
    assert (await harness.run("1")).details["remaining_calls"] == 1
    assert harness.registry.get(CODE_INTERPRETER).description == before
    assert changes == []  # nothing for a client to re-fetch


async def test_an_invocation_without_a_cap_is_never_refused(engine: Engine) -> None:
    config = CodeInterpreterConfig(timeout_ms=10_000)
    harness = Harness(engine, config=config, invocation=Invocation(max_calls=None))
    assert "Budget" not in harness.registry.get(CODE_INTERPRETER).description
    for _ in range(12):  # past the per-run default of 10
        result = await harness.run("1")
        assert result.details["outcome"] == "ok"
        assert "calls left" not in result.text
    assert harness.invocation.remaining is None


# fresh state ---------------------------------------------------------------------------------


async def test_every_call_starts_from_fresh_state(real_harness: Harness) -> None:
    harness = real_harness
    first = await harness.run(
        "import os, sys, string\n"
        "print(sorted(os.listdir('/work')))\n"
        "planted = 41\n"
        "sys.modules['planted_module'] = string\n"
        "open('/work/state.txt', 'w').write('left behind')\n"
        "string.planted = True\n"
        "planted + 1"
    )
    assert first.structured is not None
    assert outcome(first) == "ok", first.text
    pristine = first.structured["stdout"]
    second = await harness.run(
        "import os, sys, string\n"
        "print(sorted(os.listdir('/work')))\n"
        "print('planted' in globals(), 'planted_module' in sys.modules,\n"
        "      os.path.exists('/work/state.txt'), hasattr(string, 'planted'))"
    )
    assert second.structured is not None
    assert second.structured["stdout"] == pristine + "False False False False\n"


# output fitting --------------------------------------------------------------------------------


def _omitted_from_marker(text: str) -> tuple[int, str]:
    head, _, rest = text.partition("\n[... ")
    count, _, tail = rest.partition(" characters omitted ...]\n")
    return int(count), head + tail


async def test_truncation_is_exact_per_channel(engine: Engine) -> None:
    harness = Harness(engine, config=CodeInterpreterConfig(max_output_chars=1_000))
    result = await harness.run(
        "import sys\n"
        "print('a' * 5000)\n"  # 5001 characters with the newline
        "sys.stderr.write('é' * 3000)\n"
        "'b' * 2500"  # its repr has 2502 characters
    )
    data = result.structured
    assert data is not None
    for channel, total in (("stdout", 5001), ("stderr", 3000)):
        text = data[channel]
        assert len(text) <= 1_000
        count, kept = _omitted_from_marker(text)
        assert data["omitted"][channel] == count == total - len(kept)
    shown = data["result"]["text/plain"]
    count, kept = _omitted_from_marker(shown)
    assert data["omitted"]["result"] == count == 2502 - len(kept)
    for channel in ("stdout", "stderr", "result"):
        assert f"{channel}: {data['omitted'][channel]} characters omitted" in result.text
    finished = harness.events[-1]
    assert finished["phase"] == "finished"
    assert finished["omitted_chars"] == data["omitted"]


async def test_output_within_the_ceiling_is_complete(harness: Harness) -> None:
    result = await harness.run("print('x' * 999)")
    assert result.structured is not None
    assert result.structured["stdout"] == "x" * 999 + "\n"
    assert result.structured["omitted"] == {"stdout": 0, "stderr": 0, "result": 0}
    assert "omitted" not in result.text


# typed results -----------------------------------------------------------------------------------


async def test_a_python_exception_is_a_typed_bounded_result(harness: Harness) -> None:
    result = await harness.run("def f():\n    return 1 / 0\nf()")
    assert result.is_error
    assert result.error == {
        "kind": "python_error",
        "message": "Python executed and returned an exception.",
    }
    assert "ZeroDivisionError: division by zero" in result.text
    assert "line 2, in f" in result.text  # the traceback, so the model can fix the code
    assert result.structured is not None
    assert result.structured["error"]["type"] == "ZeroDivisionError"
    huge = await harness.run("raise ValueError('v' * 500_000)")
    assert outcome(huge) == "python_error"
    assert len(huge.text) < 3 * 64_000 + 5_000
    assert "characters omitted" in huge.text


async def test_figures_become_png_image_blocks(real_harness: Harness) -> None:
    harness = real_harness  # the worker's own matplotlib backend makes the PNG
    result = await harness.run(
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()\n'plotted'"
    )
    assert not result.is_error, result.text
    kinds = [block["type"] for block in result.content]
    assert kinds == ["text", "image"]
    image = result.content[1]
    assert image["type"] == "image"
    assert image["mimeType"] == "image/png"
    assert base64.b64decode(image["data"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert "1 image(s) attached (image/png)" in result.text
    assert result.structured is not None
    assert result.structured["display"][0]["image/png"] == image["data"]


async def test_code_over_the_limit_is_invalid_input_before_python(engine: Engine) -> None:
    harness = Harness(engine, config=CodeInterpreterConfig(max_code_chars=100))
    before = admitted(engine)
    result = await harness.run("#" * 101)
    assert outcome(result) == "invalid_input"
    assert "101 characters; the limit is 100" in result.text
    assert admitted(engine) == before
    assert harness.invocation.remaining == 9  # admitted calls spend the quota even so
    assert harness.phases_seen() == ["requested", "finished"]
    assert harness.context_events == [dict(e) for e in harness.events]


@pytest.mark.parametrize(
    "extra",
    [
        {"packages": ["requests"]},
        {"network": True},
        {"cwd": "/etc"},
        {"timeoutMs": 1},
        {"env": {"A": "1"}},
        {"paths": ["/etc/passwd"]},
    ],
)
async def test_no_other_input_field_is_accepted(harness: Harness, extra: dict[str, Any]) -> None:
    before = admitted(harness.engine)
    result = await harness.call({"summary": "s", "code": "print(1)", **extra})
    assert result.is_error
    assert result.error is not None
    assert result.error["kind"] == "invalid_input"
    assert harness.invocation.remaining == 10  # refused by the schema: never admitted
    assert admitted(harness.engine) == before


async def test_a_call_without_an_invocation_is_refused(engine: Engine) -> None:
    registry = ToolRegistry()
    registry.register(code_interpreter_tool(engine))
    result = await registry.call(CODE_INTERPRETER, {"summary": "s", "code": "1"})
    assert result.is_error
    assert result.error is not None
    assert result.error["kind"] == "tool_error"


async def test_a_cancelled_invocation_runs_nothing_and_spends_nothing(harness: Harness) -> None:
    harness.invocation.cancel()
    before = admitted(harness.engine)
    result = await harness.run("print('never')")
    assert outcome(result) == "cancelled"
    assert "not Python output" in result.text
    assert admitted(harness.engine) == before
    assert harness.invocation.remaining == 10


# deadlines and cancellation ------------------------------------------------------------------


def _running(comm: str) -> int:
    """Host processes named ``comm`` that are not zombies (the sandbox's pids are ours too)."""
    count = 0
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        name, state = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2]
        count += name == comm and state != "Z"
    return count


async def _until(predicate: Any, within: float = 10.0) -> None:
    # /proc has no change notification, so this polls; fail_after bounds the wait.
    with anyio.fail_after(within):
        while not predicate():  # noqa: ASYNC110 - nothing to wait on but the process table
            await anyio.sleep(0.01)


async def test_non_cooperative_code_is_stopped_by_terminating_the_worker(
    real_engine: Engine,
) -> None:
    engine = real_engine
    harness = Harness(engine, config=CodeInterpreterConfig(timeout_ms=2_500))
    comm = "ci" + secrets.token_hex(6)
    code = (
        "import ctypes, os, signal\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"  # ignores a polite stop
        "print('looping', flush=True)\n"
        "os.fork()\n"  # and so does a child it started
        f"ctypes.CDLL(None).prctl(15, b'{comm}', 0, 0, 0)\n"  # PR_SET_NAME, visible on the host
        "while True:\n    pass\n"
    )
    results: list[ToolResult] = []

    async def run() -> None:
        results.append(await harness.run(code))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await _until(lambda: _running(comm) == 2)  # both busy-loop for real
    (result,) = results
    assert outcome(result) == "timeout"
    assert result.structured is not None
    assert 2_400 <= result.structured["elapsed_ms"] < 8_000
    assert result.structured["stdout"] == "looping\n"  # real output, printed before the stop
    assert result.structured["error"] is None  # no fabricated Python exception ...
    assert "Traceback" not in result.text
    assert "TimeoutError" not in result.text
    assert "not Python output" in result.text
    await _until(lambda: _running(comm) == 0, within=5.0)
    assert engine.statistics().running == 0
    after = await harness.run("'fresh worker'")
    assert outcome(after) == "ok"


async def test_a_queued_call_cancelled_before_its_turn_never_runs(engine: Engine) -> None:
    holder, queued = Harness(engine), Harness(engine)
    before = admitted(engine)
    results: dict[str, ToolResult] = {}

    async def run(name: str, harness: Harness, code: str) -> None:
        results[name] = await harness.run(code)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "holder", holder, HOLD)
        with anyio.fail_after(10):
            await holder.phase("executing").wait()  # the only worker slot is taken
        tg.start_soon(run, "queued", queued, "print('ran')")
        with anyio.fail_after(10):
            await queued.phase("queued").wait()
        queued.invocation.cancel()
        with anyio.fail_after(10):
            await queued.phase("finished").wait()
        holder.invocation.cancel()  # frees the slot; the cancelled call must not take it
    assert outcome(results["queued"]) == "cancelled"
    assert queued.phases_seen() == ["requested", "queued", "finished"]
    assert results["queued"].structured is not None
    assert results["queued"].structured["stdout"] == ""
    assert outcome(results["holder"]) == "cancelled"
    assert admitted(engine) == before + 1
    assert queued.invocation.remaining == 9  # it was admitted to the tool, then waited


# sources -------------------------------------------------------------------------------------


async def test_sources_are_mounted_by_id_only(real_harness: Harness) -> None:
    harness = real_harness
    sources = harness.invocation.sources
    table = sources.add_attachment(b"name,hours\nA,9\nB,7.5\n", "runtimes.csv")
    note = sources.add_text("read_source text\n", "notes.txt")
    code = (
        "import json, os\n"
        "out = {i: {'path': input_files[i], 'text': open(input_files[i]).read(),\n"
        "           'assets': input_assets[i]} for i in input_files}\n"
        "for i, a in out.items():\n"
        "    a['original'] = a['assets']['original'] and open(a['assets']['original']).read()\n"
        "print(json.dumps(out))\n"
        "sorted(os.listdir('/inputs'))"
    )
    result = await harness.run(code, table.id, note.id)
    assert result.structured is not None, result.text
    seen = json.loads(result.structured["stdout"])
    assert set(seen) == {table.id, note.id}
    assert seen[table.id]["path"] == f"/inputs/{table.id}.txt"
    assert seen[table.id]["text"] == table.text.decode()
    assert seen[table.id]["original"] == "name,hours\nA,9\nB,7.5\n"
    assert seen[table.id]["assets"]["media_type"] == "text/csv"
    assert seen[note.id]["text"] == "read_source text\n"
    assert seen[note.id]["original"] is None
    listed = ast.literal_eval(result.structured["result"]["text/plain"])
    assert listed == sorted([f"{table.id}.orig", f"{table.id}.txt", f"{note.id}.txt"])
    evidence = result.structured["evidence"]["inputs"]
    assert evidence == [
        {"id": table.id, "sha256": table.text_sha256, "original_sha256": table.original_sha256},
        {"id": note.id, "sha256": note.text_sha256},
    ]


async def test_changing_a_mount_cannot_change_the_source(real_harness: Harness) -> None:
    harness = real_harness
    source = harness.invocation.sources.add_text("original\n", "a.txt")
    attempt = await harness.run(
        "try:\n"
        f"    open(input_files[{source.id!r}], 'w').write('tampered')\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__)\n",
        source.id,
    )
    assert outcome(attempt) == "ok"
    again = await harness.run(f"open(input_files[{source.id!r}]).read()", source.id)
    assert again.structured is not None
    assert again.structured["result"]["text/plain"] == repr("original\n")
    assert harness.invocation.sources.get(source.id).text == b"original\n"


async def test_attachment_to_id_to_mount_to_python(harness: Harness) -> None:
    added = await harness.call(
        {"content": "item,qty\nbolts,12\nnuts,30\n", "filename": "stock.csv"}, "source_add"
    )
    assert not added.is_error, added.text
    assert added.structured is not None
    source_id = added.structured["id"]
    assert source_id in added.text
    assert "item,qty" in added.text
    result = await harness.run(
        "import csv\n"
        f"rows = list(csv.DictReader(open(input_files[{source_id!r}])))\n"
        "sum(int(r['qty']) for r in rows)",
        source_id,
    )
    assert result.structured is not None
    assert result.structured["result"] == {"text/plain": "42"}
    assert result.structured["evidence"]["inputs"][0]["id"] == source_id


def _other_invocations_id() -> str:
    return Invocation().sources.add_text("elsewhere", "x.txt").id


@pytest.mark.parametrize(
    "make_id",
    [
        pytest.param(lambda: "src_" + secrets.token_urlsafe(16), id="invented"),
        pytest.param(lambda: "/etc/passwd", id="host-path"),
        pytest.param(lambda: "../../etc/passwd", id="traversal"),
        pytest.param(_other_invocations_id, id="other-invocation"),
    ],
)
async def test_unavailable_ids_are_rejected_before_python(harness: Harness, make_id: Any) -> None:
    before = admitted(harness.engine)
    result = await harness.run("print('never')", make_id())
    assert outcome(result) == "unavailable_source"
    assert "rejected before Python started" in result.text
    assert admitted(harness.engine) == before
    assert harness.phases_seen() == ["requested", "finished"]
    assert harness.invocation.remaining == 9


async def test_expired_and_removed_ids_are_rejected_before_python(engine: Engine) -> None:
    now = [0.0]
    sources = SourceRegistry(ttl=60.0, clock=lambda: now[0])
    harness = Harness(engine, invocation=Invocation(sources=sources))
    expiring = sources.add_text("soon gone", "a.txt")
    removed = sources.add_text("gone", "b.txt")
    sources.remove(removed.id)
    now[0] = 61.0
    before = admitted(engine)
    for source_id in (expiring.id, removed.id):
        result = await harness.run("print('never')", source_id)
        assert outcome(result) == "unavailable_source"
    assert admitted(engine) == before


async def test_duplicate_ids_are_rejected_before_python(harness: Harness) -> None:
    source = harness.invocation.sources.add_text("once", "a.txt")
    before = admitted(harness.engine)
    # Through the registry, as a model calls it ...
    via_registry = await harness.run("print('never')", source.id, source.id)
    assert outcome(via_registry) == "unavailable_source"
    # ... and as a host calling the handler directly.
    tool = harness.registry.get(CODE_INTERPRETER)
    direct = await tool.handler(
        {"summary": "s", "code": "print('never')", "sourceIds": [source.id, source.id]},
        ToolContext(invocation=harness.invocation),
    )
    assert outcome(direct) == "unavailable_source"
    assert "listed twice" in direct.text
    assert admitted(harness.engine) == before


# escape routes -------------------------------------------------------------------------------


async def test_escape_routes_are_closed(real_harness: Harness) -> None:
    harness = real_harness
    here = HERE
    code = f"""
import json, os, socket, subprocess, sys
probes = {{}}
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    probes["network"] = "connected"
except OSError as exc:
    probes["network"] = type(exc).__name__
probes["host_file"] = os.path.exists({here!r})
probes["host_cwd"] = os.path.exists({os.getcwd()!r} + "/pyproject.toml")
try:
    open(sys.prefix + "/corral-probe", "w")
    probes["write_runtime"] = "written"
except OSError as exc:
    probes["write_runtime"] = type(exc).__name__
pip = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "0",
                      "--timeout", "2", "--no-cache-dir", "-d", "/work/dl", "idna"],
                     capture_output=True, timeout=8)
probes["pip_download"] = pip.returncode
probes["downloaded"] = os.listdir("/work/dl") if os.path.isdir("/work/dl") else []
probes["inputs"] = os.listdir("/inputs") if os.path.isdir("/inputs") else []
print(json.dumps(probes))
"""
    result = await harness.run(code)
    assert result.structured is not None
    assert result.structured["outcome"] == "ok", result.text
    probes = json.loads(result.structured["stdout"])
    assert probes["network"] != "connected"
    assert probes["host_file"] is False
    assert probes["host_cwd"] is False
    assert probes["write_runtime"] != "written"
    assert probes["pip_download"] != 0  # no package installation: nothing can be fetched
    assert probes["downloaded"] == []
    assert probes["inputs"] == []  # nothing is mounted unless named by id


# quota -----------------------------------------------------------------------------------------


async def test_quota_exhaustion_refuses_before_any_work(engine: Engine) -> None:
    harness = Harness(engine, config=CodeInterpreterConfig(max_calls=2, timeout_ms=10_000))
    assert outcome(await harness.run("1")) == "ok"
    assert outcome(await harness.run("1 / 0")) == "python_error"  # failed, still spent
    before = admitted(engine)
    for _ in range(2):
        refused = await harness.run("print('never')")
        assert outcome(refused) == "quota_exceeded"
        assert refused.is_error
        assert "all 2 of its code-running calls" in refused.text
    assert admitted(engine) == before
    assert harness.phases_seen()[-4:] == ["requested", "finished"] * 2
    assert all(e["call"] == 0 for e in harness.events[-4:])
    assert harness.invocation.remaining == 0  # the description does not change; results say it
    fresh = Harness(engine)  # another invocation keeps its whole budget
    assert outcome(await fresh.run("1")) == "ok"


# progress privacy --------------------------------------------------------------------------------


async def test_progress_and_details_disclose_nothing_planted(real_harness: Harness) -> None:
    harness = real_harness  # the sandbox's own paths (/inputs, /work) must not leak either
    marks = {
        k: f"MARK{k}{secrets.token_hex(4)}"
        for k in ("code", "out", "err", "res", "file", "cell", "wfile", "exc", "bogus")
    }
    sources = harness.invocation.sources
    source = sources.add_attachment(f"k,v\n{marks['cell']},1\n".encode(), f"{marks['file']}.csv")
    code = (
        f"# {marks['code']}\n"
        "import sys\n"
        f"print('{marks['out']}', open(input_files[{source.id!r}]).read())\n"
        f"sys.stderr.write('{marks['err']}')\n"
        f"open('/work/{marks['wfile']}.txt', 'w').write('{marks['code']}')\n"
        "import matplotlib.pyplot as plt\n"
        f"plt.title('{marks['code']}'); plt.plot([1, 2]); plt.show()\n"
        f"'{marks['res']}'"
    )
    results = [
        await harness.run(code, source.id),
        await harness.run(f"raise RuntimeError('{marks['exc']}')  # {marks['code']}"),
        await harness.run(f"print('{marks['out']}')", marks["bogus"]),
    ]
    # The planting worked: the model sees what it must see ...
    assert marks["out"] in results[0].text
    assert marks["cell"] in results[0].text
    assert marks["res"] in results[0].text
    assert marks["wfile"] in results[0].text
    assert marks["exc"] in results[1].text
    assert marks["bogus"] in results[2].text
    # ... and no progress event and no persisted detail carries any of it.
    leaks = [*marks.values(), source.id, "/inputs", "/work", "Traceback", "RuntimeError"]
    assert len(harness.events) == len(harness.context_events) >= 3 * 2
    for name, payload in (
        ("invocation progress", harness.events),
        ("call progress", harness.context_events),
        ("details", [r.details for r in results]),
        ("error", [r.error for r in results]),
    ):
        serialised = json.dumps(payload)
        for leak in leaks:
            assert leak not in serialised, f"{leak!r} reached {name}"


# configuration ---------------------------------------------------------------------------------


def test_the_config_reads_the_seed_keys_from_corral_toml() -> None:
    raw = {
        "code_interpreter": {
            "maxCalls": 3,
            "timeoutMs": 5_000,
            "maxCodeCharacters": 100,
            "maxOutputCharacters": 2_000,
            "maxSources": 2,
        }
    }
    config = CodeInterpreterConfig.from_toml(raw)
    assert config == CodeInterpreterConfig(
        max_calls=3, timeout_ms=5_000, max_code_chars=100, max_output_chars=2_000, max_sources=2
    )
    assert CodeInterpreterConfig.from_toml({}) == CodeInterpreterConfig()
    limits = config.limits(Limits())
    assert (limits.timeout, limits.code_chars, limits.output_chars, limits.max_sources) == (
        5.0,
        100,
        2_000,
        2,
    )


@pytest.mark.parametrize(
    "table",
    [{"maxCall": 3}, {"maxCalls": 0}, {"timeoutMs": "30"}, {"maxSources": True}, "not a table"],
)
def test_a_bad_config_table_is_a_config_error(table: object) -> None:
    with pytest.raises(ConfigError):
        CodeInterpreterConfig.from_toml({"code_interpreter": table})

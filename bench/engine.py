"""Engine benchmark: corral's fresh isolated runs against plain Python and Jupyter kernels.

Run as ``.venv/bin/python bench/engine.py [--runs N] [--json out.json] [--markdown]``. It
starts one ``Engine``, lets its warm pool fill, then measures side by side in one process:

* ``Engine.run`` of ``print(6*7)`` and of the pandas snippet, sequentially, "pool warm" (each
  run starts once the pool is full again and the last worker is reaped: the latency a user
  sees at normal load) and "back-to-back" (the next run starts as soon as the last returns);
* ``python -I -S -c 'print(6*7)'`` and ``python -I -c '<pandas snippet>'`` subprocesses (no
  isolation at all), in rounds interleaved with the corral runs so drift hits both alike;
* a fresh Jupyter kernel per run (jupyter_client + ipykernel), when both are installed;
* throughput at capacity 2 with many concurrent clients, with CPU per run by process;
* zygote RSS and private memory per ready worker, from /proc.

It prints p50/p90, ratios and the targets of issue 2. See bench/README.md.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from _common import (
    WORKER_PROTOCOL_FD,
    CpuMeter,
    Samples,
    blocked_reading,
    children,
    corral_quiet,
    fmt,
    in_sleep,
    machine_busy_ms,
    machine_summary,
    private_kb,
    proc_cpu_ms,
    render_table,
    status_kb,
)

from corral.engine import Engine, ExecutionResult, RunEvent
from corral.errors import CorralError

PRINT = "print(6*7)"
PANDAS = "import pandas as pd; print(pd.DataFrame({'a':[9,7.5]}).a.mean())"
EXPECTED = {PRINT: "42\n", PANDAS: "8.25\n"}
PYTHON_PRINT = [sys.executable, "-I", "-S", "-c", PRINT]
PYTHON_PANDAS = [sys.executable, "-I", "-c", PANDAS]
# The worker stays alive in this run long enough to read its smaps after print() ran.
_PRINT_THEN_WAIT = "print(6*7)\nimport time\ntime.sleep(0.6)"

_IDLE_TIMEOUT = 10.0  # seconds for the pool to refill; far longer means a broken pool
_POLL = 0.0005  # seconds between /proc polls while waiting for the pool
_JUPYTER_TIMEOUT = 60.0  # seconds for one kernel to start and answer
_MIB = 1024.0
_BOOST_NICE = -20  # CFS still shares fairly among corral's own processes, unlike SCHED_FIFO
_FOREIGN_WARN = 0.05  # share of CPU used by others above which the latency numbers are suspect

TARGET_PRINT_RATIO = 0.35  # corral print p50 / python -I -S -c p50
TARGET_PRINT_STRETCH_MS = 1.0  # the "with the warm pool, aim for 1 ms"
TARGET_PANDAS_MS = 8.0
TARGET_THROUGHPUT = 250.0  # runs/s at capacity 2
TARGET_ZYGOTE_MIB = 200.0
TARGET_WORKER_MIB = 3.0


class BenchError(RuntimeError):
    """A measured run did not produce the expected output."""


@dataclass(slots=True)
class Phases:
    """Where one corral run's wall time went, from the engine's public RunEvents."""

    to_started: Samples = field(default_factory=lambda: Samples("admitted"))
    to_executing: Samples = field(default_factory=lambda: Samples("worker started the code"))
    to_finished: Samples = field(default_factory=lambda: Samples("result built"))
    to_returned: Samples = field(default_factory=lambda: Samples("returned to caller"))
    refill: Samples = field(default_factory=lambda: Samples("pool refilled"))


@dataclass(slots=True)
class Results:
    latency: dict[str, Samples] = field(default_factory=dict)
    phases: dict[str, Phases] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def samples(self, key: str, title: str) -> Samples:
        return self.latency.setdefault(key, Samples(title))


# corral ------------------------------------------------------------------------------------


def zygote_pid(engine: Engine) -> int:
    """The full zygote (numpy, pandas and matplotlib preloaded): the RSS target's subject."""
    return zygote_pids(engine)["full"]


def zygote_pids(engine: Engine) -> dict[str, int]:
    """Every zygote by flavour; stdlib-only code such as print(6*7) runs from "lean"."""
    pids = {
        name: host.pid for name, host in engine._zygote_handles().items() if host.pid is not None
    }
    if "full" not in pids:
        raise BenchError("the engine has no zygote")
    return pids


async def wait_idle(engine: Engine, within: float = _IDLE_TIMEOUT) -> float:
    """Wait until the pool is full and corral has nothing left to do; returns seconds waited."""
    started = time.perf_counter()
    with anyio.move_on_after(within):
        while True:
            stats = engine.statistics()
            if (
                stats.pool_ready >= stats.pool_size
                and stats.running == 0
                and all(corral_quiet(pid) for pid in zygote_pids(engine).values())
            ):
                return time.perf_counter() - started
            await anyio.sleep(_POLL)
    stats = engine.statistics()
    raise BenchError(
        f"the warm pool did not fill within {within:g} s (ready {stats.pool_ready}"
        f" of {stats.pool_size}, running {stats.running}); see corral's log above"
    )


def check(result: ExecutionResult, code: str) -> None:
    if result.outcome != "ok" or result.stdout != EXPECTED[code]:
        raise BenchError(
            f"{code!r} gave {result.outcome}: stdout={result.stdout!r} "
            f"stderr={result.stderr[-500:]!r} message={result.message!r}"
        )


async def corral_once(engine: Engine, code: str, phases: Phases) -> float:
    """One Engine.run; returns wall milliseconds as the caller sees them."""
    marks: dict[str, float] = {}

    def on_event(event: RunEvent) -> None:
        marks[event.phase] = event.elapsed_ms

    started = time.perf_counter()
    result = await engine.run(code, on_event=on_event)
    wall = (time.perf_counter() - started) * 1000.0
    check(result, code)
    previous = 0.0
    for phase, samples in (
        ("started", phases.to_started),
        ("executing", phases.to_executing),
        ("finished", phases.to_finished),
    ):
        mark = marks.get(phase, previous)
        samples.add(mark - previous)
        previous = mark
    phases.to_returned.add(wall - previous)
    return wall


def python_once(argv: list[str], expected: str) -> float:
    """One plain subprocess run; returns wall milliseconds."""
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False)
    wall = (time.perf_counter() - started) * 1000.0
    if done.returncode != 0 or done.stdout.decode() != expected:
        raise BenchError(f"{argv} gave {done.returncode}: {done.stdout!r} {done.stderr[-500:]!r}")
    return wall


async def measure_latency(engine: Engine, args: argparse.Namespace, res: Results) -> None:
    cases: list[tuple[str, str, Callable[[], Awaitable[float]]]] = []
    for code, label in ((PRINT, "print"), (PANDAS, "pandas")):
        phases = res.phases.setdefault(f"{label}_warm", Phases())

        async def warm(code: str = code, phases: Phases = phases) -> float:
            await wait_idle(engine)
            wall = await corral_once(engine, code, phases)
            # Every case starts with corral idle, so a refill never competes with a baseline.
            phases.refill.add(await wait_idle(engine) * 1000.0)
            return wall

        cases.append((f"corral_{label}_warm", f"corral {label}, pool warm", warm))

    async def py_print() -> float:
        await wait_idle(engine)
        return python_once(PYTHON_PRINT, EXPECTED[PRINT])

    cases.append(("python_print", "python -I -S -c (no isolation)", py_print))

    # Interleave rounds, rotating the order, so slow drift and position effects hit every case.
    for i in range(args.runs):
        for j in range(len(cases)):
            key, title, once = cases[(i + j) % len(cases)]
            res.samples(key, title).add(await once())

    for code, label in ((PRINT, "print"), (PANDAS, "pandas")):
        phases = res.phases.setdefault(f"{label}_b2b", Phases())
        await wait_idle(engine)
        samples = res.samples(f"corral_{label}_b2b", f"corral {label}, back-to-back")
        for _ in range(args.runs):
            samples.add(await corral_once(engine, code, phases))

    samples = res.samples("python_pandas", "python -I -c (no isolation)")
    for _ in range(args.slow_runs):
        samples.add(python_once(PYTHON_PANDAS, EXPECTED[PANDAS]))


# Jupyter -----------------------------------------------------------------------------------


def jupyter_missing() -> str:
    missing = [m for m in ("jupyter_client", "ipykernel") if importlib.util.find_spec(m) is None]
    return ", ".join(missing)


async def jupyter_once(code: str, workdir: str, index: int) -> float:
    """A fresh kernel: start, wait ready, execute, output seen; shutdown is not timed."""
    manager_module: Any = importlib.import_module("jupyter_client.manager")
    started = time.perf_counter()
    kernel = manager_module.AsyncKernelManager(
        kernel_name="python3", transport="ipc", ip=os.path.join(workdir, f"k{index}")
    )
    client: Any = None
    try:
        with anyio.fail_after(_JUPYTER_TIMEOUT):
            await kernel.start_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            client = kernel.client()
            client.start_channels()
            await client.wait_for_ready(timeout=_JUPYTER_TIMEOUT)
            msg_id = client.execute(code)
            out: list[str] = []
            while True:
                msg = await client.get_iopub_msg(timeout=_JUPYTER_TIMEOUT)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream":
                    out.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    raise BenchError(f"Jupyter kernel raised {msg['content']['ename']}")
                elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    break
        wall = (time.perf_counter() - started) * 1000.0
    finally:
        with anyio.CancelScope(shield=True):
            if client is not None:
                client.stop_channels()
            await kernel.shutdown_kernel(now=True)
    if "".join(out) != EXPECTED[code]:
        raise BenchError(f"Jupyter printed {''.join(out)!r}")
    return wall


async def measure_jupyter(args: argparse.Namespace, res: Results) -> None:
    missing = jupyter_missing()
    if missing:
        res.notes.append(
            f"Jupyter kernel skipped: {missing} not installed "
            "(pip install jupyter_client ipykernel to compare)"
        )
        return
    if args.slow_runs == 0:
        return
    with tempfile.TemporaryDirectory(prefix="corral-bench-jupyter-") as workdir:
        index = 0
        for code, label in ((PRINT, "print"), (PANDAS, "pandas")):
            samples = res.samples(f"jupyter_{label}", "Jupyter, fresh kernel per run")
            for _ in range(args.slow_runs):
                index += 1
                samples.add(await jupyter_once(code, workdir, index))


# throughput --------------------------------------------------------------------------------


def _zygotes_cpu_ms(pids: list[int]) -> tuple[float, float]:
    own, kids = 0.0, 0.0
    for pid in pids:
        pid_own, pid_kids = proc_cpu_ms(pid)
        own, kids = own + pid_own, kids + pid_kids
    return own, kids


async def measure_throughput(engine: Engine, args: argparse.Namespace, res: Results) -> None:
    await wait_idle(engine)
    zpids = list(zygote_pids(engine).values())
    outcomes: Counter[str] = Counter()
    bad: list[str] = []
    own0 = os.times()
    z_own0, z_kids0 = _zygotes_cpu_ms(zpids)
    busy0 = machine_busy_ms()
    started = anyio.current_time()
    stop = started + args.seconds

    async def client() -> None:
        while anyio.current_time() < stop:
            result = await engine.run(PRINT)
            ok = result.outcome == "ok" and result.stdout == EXPECTED[PRINT]
            outcomes["ok" if ok else result.outcome] += 1
            if not ok and len(bad) < 3:
                bad.append(f"{result.outcome}: {result.message} {result.stderr[-200:]!r}")

    async with anyio.create_task_group() as tg:
        for _ in range(args.clients):
            tg.start_soon(client)
    elapsed = anyio.current_time() - started
    own1 = os.times()
    z_own1, z_kids1 = _zygotes_cpu_ms(zpids)
    busy1 = machine_busy_ms()
    runs = max(1, sum(outcomes.values()))
    engine_ms = ((own1.user + own1.system) - (own0.user + own0.system)) * 1000.0
    res.info["throughput"] = {
        "capacity": engine.capacity,
        "pool_size": engine.statistics().pool_size,
        "clients": args.clients,
        "seconds": elapsed,
        "outcomes": dict(outcomes),
        "ok_per_second": outcomes["ok"] / elapsed,
        "cpu_ms_per_run": {
            "engine process": engine_ms / runs,
            "zygote": (z_own1 - z_own0) / runs,
            "workers": (z_kids1 - z_kids0) / runs,
            "corral total": (engine_ms + z_own1 - z_own0 + z_kids1 - z_kids0) / runs,
            "whole machine": (busy1 - busy0) / runs,
        },
        "examples_of_failures": bad,
    }


# memory ------------------------------------------------------------------------------------


async def measure_memory(engine: Engine, res: Results) -> None:
    await wait_idle(engine)
    zpid = zygote_pid(engine)
    # print(6*7) is served by the lean zygote's workers when there is one.
    print_zygote = zygote_pids(engine).get("lean", zpid)
    ready = [pid for pid in children(print_zygote) if blocked_reading(pid, WORKER_PROTOCOL_FD)]
    ready_kb = [kb for kb in (private_kb(pid) for pid in ready) if kb is not None]
    memory: dict[str, Any] = {
        "zygote_pid": zpid,
        "zygote_vmrss_kb": status_kb(zpid, "VmRSS"),
        "zygote_rss_anon_kb": status_kb(zpid, "RssAnon"),
        "zygote_rss_file_kb": status_kb(zpid, "RssFile"),
        "lean_zygote_vmrss_kb": status_kb(print_zygote, "VmRSS") if print_zygote != zpid else None,
        "ready_workers": len(ready),
        "ready_worker_private_kb": ready_kb,
    }

    # The worker that ran print(6*7) then sleeps in time.sleep(); read it before it exits.
    running_kb: list[int] = []

    async def sample() -> None:
        with anyio.move_on_after(0.5):
            while True:
                asleep = [p for p in children(print_zygote) if in_sleep(p)]
                if asleep:
                    kb = private_kb(asleep[0])
                    if kb is not None:
                        running_kb.append(kb)
                    return
                await anyio.sleep(0.005)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sample)
        result = await engine.run(_PRINT_THEN_WAIT)
        if result.outcome != "ok":
            raise BenchError(f"memory probe run gave {result.outcome}: {result.message}")
    memory["print_worker_after_run_private_kb"] = running_kb[0] if running_kb else None
    res.info["memory"] = memory


# report ------------------------------------------------------------------------------------


def _met(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "no")


def report(res: Results, args: argparse.Namespace) -> str:
    lat = res.latency
    md = args.markdown
    out: list[str] = []
    info = res.info
    out.append(f"corral engine benchmark: {machine_summary()}")
    out.append(f"runtime: {info['runtime']}")
    out.append(
        f"engine: capacity {info['capacity']}, pool {info['pool_size']}, started in "
        f"{info['start_seconds']:.2f} s; {args.runs} runs per corral/python -S case, "
        f"{args.slow_runs} per python -I pandas and Jupyter case"
    )
    out.append("")

    def ratio(key: str, base: str) -> str:
        if key not in lat or base not in lat or not lat[base].values:
            return "-"
        return f"{lat[key].p50 / lat[base].p50:.3f}x"

    rows: list[list[str]] = []
    for snippet, base, keys in (
        (
            "print(6*7)",
            "python_print",
            ("corral_print_warm", "corral_print_b2b", "python_print", "jupyter_print"),
        ),
        (
            "pandas snippet",
            "python_pandas",
            ("corral_pandas_warm", "corral_pandas_b2b", "python_pandas", "jupyter_pandas"),
        ),
    ):
        for key in keys:
            if key not in lat:
                continue
            s = lat[key]
            rows.append(
                [snippet, s.name, fmt(s.p50), fmt(s.p90), ratio(key, base), str(len(s.values))]
            )
    out.append("Latency, sequential, wall clock as the caller sees it (ms)")
    out.append(
        render_table(["snippet", "how", "p50", "p90", "p50 / python", "n"], rows, markdown=md)
    )
    out.append("")

    tp = info["throughput"]
    mem = info["memory"]
    py = lat["python_print"].p50
    warm = lat["corral_print_warm"].p50
    pandas = lat["corral_pandas_warm"].p50
    rate = tp["ok_per_second"]
    zygote_mib = (mem["zygote_vmrss_kb"] or 0) / _MIB
    worker_kb = sorted(mem["ready_worker_private_kb"])
    worker_mib = (worker_kb[len(worker_kb) // 2] / _MIB) if worker_kb else float("nan")
    targets = [
        [
            "fresh isolated print(6*7) p50, pool warm",
            f"{fmt(warm)} ms (python {fmt(py)} ms)",
            f"{warm / py:.3f}x python",
            f"<= {TARGET_PRINT_RATIO}x python",
            _met(warm / py <= TARGET_PRINT_RATIO),
        ],
        [
            "stretch: print(6*7) p50, pool warm",
            f"{fmt(warm)} ms",
            f"{warm / TARGET_PRINT_STRETCH_MS:.2f}x goal",
            f"<= {TARGET_PRINT_STRETCH_MS:g} ms",
            _met(warm <= TARGET_PRINT_STRETCH_MS),
        ],
        [
            "pandas snippet p50, pool warm",
            f"{fmt(pandas)} ms",
            f"{pandas / TARGET_PANDAS_MS:.2f}x goal",
            f"<= {TARGET_PANDAS_MS:g} ms",
            _met(pandas <= TARGET_PANDAS_MS),
        ],
        [
            f"throughput at capacity {tp['capacity']}, {tp['clients']} clients",
            f"{rate:.0f} runs/s",
            f"{rate / TARGET_THROUGHPUT:.2f}x goal",
            f">= {TARGET_THROUGHPUT:g} runs/s",
            _met(rate >= TARGET_THROUGHPUT),
        ],
        [
            "zygote RSS (VmRSS)",
            f"{zygote_mib:.1f} MiB",
            f"{zygote_mib / TARGET_ZYGOTE_MIB:.2f}x goal",
            f"<= {TARGET_ZYGOTE_MIB:g} MiB",
            _met(zygote_mib <= TARGET_ZYGOTE_MIB),
        ],
        [
            "private memory per ready print worker (median)",
            f"{worker_mib:.2f} MiB",
            f"{worker_mib / TARGET_WORKER_MIB:.2f}x goal",
            f"<= {TARGET_WORKER_MIB:g} MiB",
            _met(worker_mib <= TARGET_WORKER_MIB),
        ],
    ]
    out.append("Targets (issue 2; 2-core machine, medians)")
    out.append(render_table(["target", "measured", "ratio", "goal", "met"], targets, markdown=md))
    out.append("")

    phase_rows: list[list[str]] = []
    for key, title in (
        ("print_warm", "print, pool warm"),
        ("print_b2b", "print, back-to-back"),
        ("pandas_warm", "pandas, pool warm"),
    ):
        ph = res.phases.get(key)
        if ph is None:
            continue
        parts = (ph.to_started, ph.to_executing, ph.to_finished, ph.to_returned)
        phase_rows.append(
            [title, *(fmt(p.p50, 3) for p in parts), fmt(sum(p.p50 for p in parts), 3)]
        )
    out.append("Where a run's time goes (p50 ms of each phase, from Engine.run's RunEvents)")
    out.append(
        render_table(
            [
                "run",
                "call -> admitted",
                "-> worker started the code",
                "-> result built",
                "-> returned",
                "sum",
            ],
            phase_rows,
            markdown=md,
        )
    )
    refill = res.phases["print_warm"].refill
    out.append(
        f"Pool refill after a pool-warm print run (until corral is idle again): "
        f"p50 {fmt(refill.p50)} ms, p90 {fmt(refill.p90)} ms"
    )
    out.append("")

    cpu = tp["cpu_ms_per_run"]
    out.append(
        f"Throughput run: {tp['seconds']:.1f} s, outcomes {tp['outcomes']}; CPU ms per run: "
        + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
        + f" (at corral's own cost, {os.cpu_count()} idle CPUs allow "
        f"{1000 * (os.cpu_count() or 1) / max(cpu['corral total'], 1e-9):.0f} runs/s; the "
        "whole-machine figure adds other processes and kernel threads)"
    )
    if tp["examples_of_failures"]:
        out.append("  failures: " + "; ".join(tp["examples_of_failures"]))
    ready = ", ".join(f"{kb / _MIB:.2f}" for kb in worker_kb)
    after = mem["print_worker_after_run_private_kb"]
    anon = (mem["zygote_rss_anon_kb"] or 0) / _MIB
    file_backed = (mem["zygote_rss_file_kb"] or 0) / _MIB
    out.append(
        f"Memory: zygote VmRSS {zygote_mib:.1f} MiB (anon {anon:.1f}, file {file_backed:.1f}); "
        + (
            f"lean zygote VmRSS {mem['lean_zygote_vmrss_kb'] / 1024:.1f} MiB; "
            if mem.get("lean_zygote_vmrss_kb")
            else ""
        )
        + f"print workers: "
        f"{mem['ready_workers']} ready of {info['pool_size']} pooled in all, private MiB: "
        f"[{ready}]; a worker after running print(6*7): "
        + (f"{after / _MIB:.2f} MiB private" if after is not None else "not sampled")
    )
    foreign = info.get("foreign_cpu_share", 0.0)
    waited = info.get("run_queue_wait_ms", 0.0)
    per_run = waited / max(1, info.get("corral_runs_timed", 1))
    out.append(
        f"Other processes used {foreign:.1%} of the machine's CPU during the latency runs; "
        f"this process and the zygote waited {waited:.0f} ms for a CPU meanwhile "
        f"({per_run:.2f} ms per timed corral run; workers not counted)."
    )
    if info.get("boost"):
        out.append("Sequential runs were timed at nice -20 (--boost); throughput ran at nice 0.")
    elif foreign > _FOREIGN_WARN:
        out.append(
            f"WARNING: other processes used {foreign:.0%} of the machine's CPU during the "
            "latency runs; the numbers above are not representative. Re-run when idle."
        )
    for note in res.notes:
        out.append(f"Note: {note}")
    return "\n".join(out)


def as_json(res: Results, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "machine": machine_summary(),
        "args": vars(args),
        "latency": {
            k: {"title": s.name, **s.as_dict(), "samples_ms": s.values}
            for k, s in res.latency.items()
        },
        "phases": {
            k: {
                f.name: f.as_dict()
                for f in (p.to_started, p.to_executing, p.to_finished, p.to_returned, p.refill)
            }
            for k, p in res.phases.items()
        },
        "notes": res.notes,
        **res.info,
    }


def set_nice(pids: list[int], value: int) -> None:
    """Set the nice value of every thread of ``pids``; children inherit it.

    Raises:
        BenchError: not permitted (a negative value needs root or CAP_SYS_NICE).
    """
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, value)
            except ProcessLookupError:
                continue
            except PermissionError as exc:
                raise BenchError("--boost needs root (CAP_SYS_NICE)") from exc


def _ours(engine: Engine | None) -> list[int]:
    if engine is None:
        return [os.getpid()]
    pids = [os.getpid()]
    for zpid in zygote_pids(engine).values():
        pids += [zpid, *children(zpid)]
    return pids


async def run(args: argparse.Namespace) -> Results:
    res = Results()
    res.info["boost"] = args.boost
    started = time.perf_counter()
    async with Engine(capacity=args.capacity) as engine:
        await wait_idle(engine, within=120.0)
        stats = engine.statistics()
        res.info.update(
            start_seconds=time.perf_counter() - started,
            runtime=engine.runtime,
            capacity=stats.capacity,
            pool_size=stats.pool_size,
        )
        if args.boost:
            set_nice(_ours(engine), _BOOST_NICE)
        try:
            warm_phases = Phases()
            for _ in range(args.warmup):
                for code in (PRINT, PANDAS):
                    await corral_once(engine, code, warm_phases)
            await measure_memory(engine, res)
            meter = CpuMeter(list(zygote_pids(engine).values()))
            await measure_latency(engine, args, res)
            res.info["foreign_cpu_share"] = meter.foreign_share()
            runs = sum(len(s.values) for k, s in res.latency.items() if k.startswith("corral"))
            res.info["run_queue_wait_ms"] = meter.run_queue_wait_ms()
            res.info["corral_runs_timed"] = runs
        finally:
            if args.boost:
                set_nice(_ours(engine), 0)
        # Never boosted: saturating both CPUs at nice -20 would starve everyone else.
        await measure_throughput(engine, args, res)
    if args.boost:
        set_nice(_ours(None), _BOOST_NICE)
    try:
        await measure_jupyter(args, res)
    finally:
        if args.boost:
            set_nice(_ours(None), 0)
    return res


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs",
        type=int,
        default=200,
        help="runs per fast case (corral, python -I -S); default 200",
    )
    parser.add_argument(
        "--slow-runs",
        type=int,
        default=10,
        help="runs per slow case (python -I pandas, Jupyter); default 10",
    )
    parser.add_argument("--warmup", type=int, default=20, help="discarded runs per snippet")
    parser.add_argument("--capacity", type=int, default=2, help="engine capacity; default 2")
    parser.add_argument("--seconds", type=float, default=5.0, help="throughput run length")
    parser.add_argument("--clients", type=int, default=16, help="concurrent throughput clients")
    parser.add_argument(
        "--boost",
        action="store_true",
        help="time the sequential runs at nice -20 (root): on a shared "
        "machine this keeps other load from inflating latency",
    )
    parser.add_argument("--json", metavar="PATH", help="also write every sample as JSON")
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.slow_runs < 0 or args.capacity < 1 or args.clients < 1:
        parser.error("--runs, --capacity and --clients must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        res = anyio.run(run, args)
    except (BenchError, CorralError) as exc:
        print(f"benchmark failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(report(res, args))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(as_json(res, args), out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The E2B SDK's pause, resume, lifecycle and snapshot calls against a live ``corral serve``.

Usage: ``python sdk_pause_scenarios.py BASE_URL KEY OTHER_KEY SERVER_DATA_DIR PHASE [JSON]``.
``live``: every call on one server. ``before`` / ``after``: around a restart the test makes
(``JSON`` carries the ids ``before`` printed). Prints one JSON object: for each scenario, what
the SDK saw (or the exception it raised). Imports nothing of corral.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BASE, KEY, OTHER_KEY, SERVER_DATA, PHASE = sys.argv[1:6]
CARRIED: dict[str, Any] = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
os.environ.update(E2B_API_URL=BASE, E2B_SANDBOX_URL=BASE, E2B_API_KEY=KEY)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: its tests package

from e2b_code_interpreter import Sandbox  # noqa: E402

from e2b import SandboxQuery, SandboxState  # noqa: E402
from tests.e2b.scenariokit import RESULTS, recorded  # noqa: E402

WAIT_S = 20.0  # bound of every wait for the server to change a sandbox's state
SCENARIOS: dict[str, list[Callable[[], None]]] = {"live": [], "before": [], "after": []}
STATE = "import math\nx = 41\ndef f(): return x + 1\nopen('/home/user/kept.txt', 'w').write('kept')"
BUSY = (
    "import threading\ndef spin():\n    while True: pass\n"
    "threading.Thread(target=spin, daemon=True).start()"
)


def scenario(phase: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    def register(fn: Callable[[], Any]) -> Callable[[], Any]:
        SCENARIOS[phase].append(recorded(fn))
        return fn

    return register


def _raised(call: Callable[[], Any]) -> str:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - which exception is the answer
        return type(exc).__name__
    return "nothing"


def _states(*ids: str) -> dict[str, str]:
    listed = Sandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING, SandboxState.PAUSED]))
    found = {s.sandbox_id: s.state.value for s in listed.next_items()}
    return {i: found.get(i, "absent") for i in ids}


def _wait_state(sandbox_id: str, state: str) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if Sandbox.get_info(sandbox_id).state.value == state:
            return True
        time.sleep(0.1)  # noqa: TID251 - a bounded condition poll: the server announces nothing
    return False


@scenario("live")
def pause_full_and_connect() -> dict[str, Any]:
    sbx = Sandbox.create()
    try:
        sbx.run_code(STATE + "\n" + BUSY)
        paused = sbx.pause()
        again = sbx.pause()
        info = sbx.get_info()
        listed_paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        listed_running = Sandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING])).next_items()
        sbx.get_metrics()  # a sample ends here: the next one covers the pause alone
        metrics_before = sbx.get_metrics()
        back = Sandbox.connect(sbx.sandbox_id)
        answer = back.run_code("f(), math.pi, open('/home/user/kept.txt').read()").text
        return {
            "paused": paused, "again": again, "state": info.state.value,
            "in_paused": sbx.sandbox_id in [s.sandbox_id for s in listed_paused],
            "in_running": sbx.sandbox_id in [s.sandbox_id for s in listed_running],
            "cpu_while_paused": [m.cpu_used_pct for m in metrics_before][-1:],
            "answer": answer, "running": back.is_running(),
            "state_after": back.get_info().state.value,
        }  # fmt: skip
    finally:
        sbx.kill()


@scenario("live")
def pause_filesystem() -> dict[str, Any]:
    sbx = Sandbox.create()
    try:
        sbx.run_code(STATE)
        paused = sbx.pause(mode="filesystem")
        back = Sandbox.connect(sbx.sandbox_id)
        answer = back.run_code("open('/home/user/kept.txt').read(), 'x' in dir()").text
        return {"paused": paused, "answer": answer, "file": back.files.read("/home/user/kept.txt")}
    finally:
        sbx.kill()


@scenario("live")
def lifecycle_pauses_at_timeout() -> dict[str, Any]:
    full = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause"})
    files = Sandbox.create(
        timeout=2, lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}}
    )
    auto = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause", "auto_resume": True})
    try:
        for sbx in (full, files, auto):
            sbx.run_code(STATE)
        waited = [_wait_state(s.sandbox_id, "paused") for s in (full, files, auto)]
        info = full.get_info()
        back = Sandbox.connect(full.sandbox_id, timeout=60)
        files_back = Sandbox.connect(files.sandbox_id, timeout=60)
        woken = auto.run_code("f()").text  # its traffic resumes it
        return {
            "waited": waited,
            "lifecycle": dict(info.lifecycle or {}),
            "full": back.run_code("f()").text,
            "files": files_back.run_code("open('/home/user/kept.txt').read(), 'x' in dir()").text,
            "auto": woken,
            "auto_state": auto.get_info().state.value,
        }
    finally:
        for sbx in (full, files, auto):
            sbx.kill()


@scenario("live")
def snapshots() -> dict[str, Any]:
    source = Sandbox.create()
    made: list[Any] = []
    try:
        source.run_code(STATE)
        snap = source.create_snapshot(name="base")
        started = time.perf_counter()
        first = Sandbox.create(snap.snapshot_id)
        made.append(first)
        second = Sandbox.create(snap.snapshot_id)
        made.append(second)
        first.run_code("x = 100\nopen('/home/user/kept.txt', 'w').write('first')")
        mine = [s.snapshot_id for s in Sandbox.list_snapshots().next_items()]
        of_source = [s.snapshot_id for s in source.list_snapshots().next_items()]
        others = [s.snapshot_id for s in Sandbox.list_snapshots(api_key=OTHER_KEY).next_items()]
        result = {
            "names": snap.names,
            "first": first.run_code("f()").text,
            "second": second.run_code("f(), open('/home/user/kept.txt').read()").text,
            "source": source.run_code("f()").text,
            "source_running": source.is_running(),
            "listed": snap.snapshot_id in mine,
            "listed_for_source": of_source == [snap.snapshot_id],
            "other_key_sees": snap.snapshot_id in others,
            "other_key_creates": _raised(
                lambda: Sandbox.create(snap.snapshot_id, api_key=OTHER_KEY)
            ),
            "other_key_deletes": Sandbox.delete_snapshot(snap.snapshot_id, api_key=OTHER_KEY),
            "two_created_s": time.perf_counter() - started,
            "deleted": Sandbox.delete_snapshot(snap.snapshot_id),
            "deleted_again": Sandbox.delete_snapshot(snap.snapshot_id),
            "create_after_delete": _raised(lambda: Sandbox.create(snap.snapshot_id)),
        }  # fmt: skip
        files_only = source.create_snapshot(mode="filesystem")
        fresh = Sandbox.create(files_only.snapshot_id)
        made.append(fresh)
        result["files_only"] = fresh.run_code(
            "open('/home/user/kept.txt').read(), 'x' in dir()"
        ).text
        return result
    finally:
        for sbx in [source, *made]:
            sbx.kill()


@scenario("live")
def corrupt_snapshot() -> dict[str, Any]:
    with Sandbox.create() as source:
        snap = source.create_snapshot()
    folder = Path(SERVER_DATA) / "paused" / "v1" / "snapshots" / snap.snapshot_id
    (folder / "meta.json").write_text('{"format": 1, "id": "someone else')
    refused = _raised(lambda: Sandbox.create(snap.snapshot_id))
    try:
        Sandbox.create(snap.snapshot_id)
        message = ""
    except Exception as exc:  # noqa: BLE001 - the message is judged
        message = str(exc)
    with Sandbox.create() as after:
        still = after.run_code("1 + 1").text
    return {"refused": refused, "message": message[:300], "still": still}


@scenario("live")
def kill_paused_and_owners() -> dict[str, Any]:
    sbx = Sandbox.create()
    sbx.run_code("x = 1")
    sbx.pause()
    other = {
        "pause": _raised(lambda: Sandbox.pause(sbx.sandbox_id, api_key=OTHER_KEY)),
        "connect": _raised(lambda: Sandbox.connect(sbx.sandbox_id, api_key=OTHER_KEY)),
        "info": _raised(lambda: Sandbox.get_info(sbx.sandbox_id, api_key=OTHER_KEY)),
        "kill": Sandbox.kill(sbx.sandbox_id, api_key=OTHER_KEY),
        "snapshot": _raised(lambda: Sandbox.create_snapshot(sbx.sandbox_id, api_key=OTHER_KEY)),
    }
    data_plane = _raised(lambda: sbx.run_code("x"))  # paused, no auto_resume: not reachable
    killed = sbx.kill()
    return {
        "other": other, "data_plane": data_plane, "killed": killed,
        "connect_after": _raised(lambda: Sandbox.connect(sbx.sandbox_id)),
        "states": _states(sbx.sandbox_id),
    }  # fmt: skip


@scenario("live")
def paused_hold_no_slot() -> dict[str, Any]:
    """Three paused sandboxes, each with a busy loop, on a server of capacity two."""
    paused = [Sandbox.create() for _ in range(3)]
    try:
        for sbx in paused:
            sbx.run_code(BUSY)
            sbx.pause()
        with Sandbox.create() as fourth:
            answer = fourth.run_code("2 + 2").text
        for sbx in paused:
            sbx.get_metrics()  # a sample ends here: the next one covers the pause alone
        cpu = [[m.cpu_used_pct for m in sbx.get_metrics()][-1:] for sbx in paused]
        return {"answer": answer, "cpu": cpu}
    finally:
        for sbx in paused:
            sbx.kill()


@scenario("before")
def before_restart() -> dict[str, Any]:
    running = Sandbox.create(timeout=600)
    running.run_code(STATE + "\nimport threading\nlock = threading.Lock()")
    full = Sandbox.create(timeout=600)
    full.run_code(STATE)
    full.pause()
    files = Sandbox.create(timeout=600)
    files.run_code(STATE)
    files.pause(mode="filesystem")
    return {"running": running.sandbox_id, "full": full.sandbox_id, "files": files.sandbox_id}


@scenario("after")
def after_restart() -> dict[str, Any]:
    ids: dict[str, str] = CARRIED["before_restart"]["ok"]
    states = _states(*ids.values())
    seen: dict[str, Any] = {"states": states}
    for name, sandbox_id in ids.items():
        try:
            back = Sandbox.connect(sandbox_id)
        except Exception as exc:  # noqa: BLE001 - judged by the test
            seen[name] = type(exc).__name__
            continue
        answer = back.run_code("open('/home/user/kept.txt').read(), 'x' in dir() and f()")
        seen[name] = answer.text
        seen[name + "_lost"] = back.get_info().metadata.get("corral.lost", "")
        back.kill()
    return seen


SKIP = set(os.environ.get("E2B_SCENARIOS_SKIP", "").split(","))
for phase in PHASE.split(","):
    for run in SCENARIOS[phase]:
        if run.__name__ not in SKIP:
            run()
print(json.dumps(RESULTS), flush=True)
os._exit(0)  # as sdk_scenarios.py: the SDK's own interpreter shutdown is not judged here

"""The unmodified E2B SDK's pause, resume, lifecycle and snapshots, and sandboxes across a
graceful restart and a SIGKILL of ``corral serve``, on servers of this module's own."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2b.conftest import CORRAL, KEY, OTHER_KEY, _free_port, sdk_python

pytestmark = [pytest.mark.isolation, pytest.mark.network, pytest.mark.timeout(600)]

SCENARIOS = Path(__file__).with_name("sdk_pause_scenarios.py")
SDK = ("2.63.0", "2.11.5")
_TIMEOUT = 300  # seconds for one phase of scenarios


@contextlib.contextmanager
def _server(data_dir: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "MISTRAL_"))}
    env.update(
        CORRAL_API_KEYS=f"{KEY}:alice,{OTHER_KEY}:bob",
        CORRAL_DATA_DIR=str(data_dir),
        CORRAL_TIMEOUT="30",
        CORRAL_CAPACITY="2",
        CORRAL_SHUTDOWN_GRACE="20",
        CORRAL_PACKAGES_INDEX_URL="",
    )
    server = subprocess.Popen(
        [CORRAL, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stderr is not None
    said: list[str] = []
    try:
        for line in server.stderr:
            said.append(line)
            if "Uvicorn running" in line:
                break
        else:
            pytest.fail("corral serve exited: " + "".join(said))
        reader = threading.Thread(target=said.extend, args=(server.stderr,), daemon=True)
        reader.start()
        yield f"http://127.0.0.1:{port}", server
    finally:
        if server.poll() is None:
            server.terminate()  # a graceful stop: its zygotes and cgroups go with it
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
        server.stderr.close()


def _phase(url: str, data_dir: Path, phase: str, carried: dict[str, Any] | None = None) -> Any:
    python = sdk_python(*SDK)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "CORRAL_"))}
    env["PYTHONFAULTHANDLER"] = "1"
    argv = [str(python), str(SCENARIOS), url, KEY, OTHER_KEY, str(data_dir), phase]
    if carried is not None:
        argv.append(json.dumps(carried))
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=_TIMEOUT, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def ok(seen: dict[str, Any], name: str) -> Any:
    outcome = seen[name]
    assert "ok" in outcome, f"{name} raised {outcome.get('raised')}: {outcome.get('traceback')}"
    return outcome["ok"]


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three servers on one data folder: every live call and sandboxes left for a restart;
    SIGTERM; the next server finds them and leaves more; SIGKILL; the last finds what is left."""
    data_dir = tmp_path_factory.mktemp("e2b-pause")
    found: dict[str, Any] = {}
    with _server(data_dir) as (url, process):
        found["live"] = _phase(url, data_dir, "live,before")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
    with _server(data_dir) as (url, process):
        found["term"] = _phase(url, data_dir, "after", found["live"])
        found["kill_before"] = _phase(url, data_dir, "before")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    with _server(data_dir) as (url, _process):
        found["kill"] = _phase(url, data_dir, "after", found["kill_before"])
    return found


@pytest.fixture(scope="module")
def live(seen: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = seen["live"]
    return result


def test_pause_full_lists_paused_and_connect_resumes_everything(live: dict[str, Any]) -> None:
    seen = ok(live, "pause_full_and_connect")
    assert (seen["paused"], seen["again"], seen["state"]) == (True, False, "paused")
    assert seen["in_paused"]
    assert not seen["in_running"]
    assert seen["cpu_while_paused"] == [0.0]
    assert seen["answer"] == "(42, 3.141592653589793, 'kept')"
    assert (seen["running"], seen["state_after"]) == (True, "running")


def test_a_filesystem_pause_keeps_files_only(live: dict[str, Any]) -> None:
    seen = ok(live, "pause_filesystem")
    assert seen["answer"] == "('kept', False)"
    assert seen["file"] == "kept"


def test_lifecycle_pauses_at_the_timeout_and_auto_resume_wakes_on_traffic(
    live: dict[str, Any],
) -> None:
    seen = ok(live, "lifecycle_pauses_at_timeout")
    assert seen["waited"] == [True, True, True]
    assert seen["lifecycle"] == {"on_timeout": "pause", "auto_resume": False}
    assert seen["full"] == "42"
    assert seen["files"] == "('kept', False)"
    assert (seen["auto"], seen["auto_state"]) == ("42", "running")


def test_snapshots_start_copies_and_belong_to_their_key(live: dict[str, Any]) -> None:
    seen = ok(live, "snapshots")
    assert seen["names"] == ["base"]
    assert (seen["first"], seen["second"], seen["source"]) == ("101", "(42, 'kept')", "42")
    assert seen["source_running"]
    assert seen["listed"]
    assert seen["listed_for_source"]
    assert not seen["other_key_sees"]
    assert seen["other_key_creates"] in ("NotFoundException", "SandboxException")
    assert (seen["other_key_deletes"], seen["deleted"], seen["deleted_again"]) == (
        False, True, False,
    )  # fmt: skip
    assert seen["create_after_delete"] != "nothing"
    assert seen["files_only"] == "('kept', False)"


def test_a_corrupt_snapshot_is_a_clear_error_and_the_server_goes_on(live: dict[str, Any]) -> None:
    seen = ok(live, "corrupt_snapshot")
    assert seen["refused"] == "SandboxException"
    assert "corrupt" in seen["message"]
    assert seen["still"] == "2"


def test_a_paused_sandbox_is_its_owners_and_kill_ends_it(live: dict[str, Any]) -> None:
    seen = ok(live, "kill_paused_and_owners")
    assert seen["other"] == {
        "pause": "SandboxNotFoundException", "connect": "SandboxNotFoundException",
        "info": "SandboxNotFoundException", "kill": False,
        "snapshot": "SandboxNotFoundException",
    }  # fmt: skip
    assert seen["data_plane"] != "nothing"
    assert seen["killed"] is True
    assert seen["connect_after"] == "SandboxNotFoundException"
    assert seen["states"] == {next(iter(seen["states"])): "absent"}


def test_three_paused_sandboxes_at_capacity_two_hold_no_slot(live: dict[str, Any]) -> None:
    seen = ok(live, "paused_hold_no_slot")
    assert seen["answer"] == "4"
    assert seen["cpu"] == [[0.0], [0.0], [0.0]]  # frozen busy loops use no CPU at all


def test_sandboxes_outlive_a_graceful_restart(seen: dict[str, Any]) -> None:
    ok(seen["live"], "before_restart")
    after = ok(seen["term"], "after_restart")
    assert after["states"] == dict.fromkeys(after["states"], "paused")
    assert after["running"] == "('kept', 42)"  # full: its globals came back
    assert "lock" in after["running_lost"]  # what was not kept is named
    assert after["full"] == "('kept', 42)"
    assert after["files"] == "('kept', False)"


def test_after_a_sigkill_running_sandboxes_are_not_found_and_paused_ones_keep_files(
    seen: dict[str, Any],
) -> None:
    ok(seen["kill_before"], "before_restart")
    after = ok(seen["kill"], "after_restart")
    assert list(after["states"].values()) == ["absent", "paused", "paused"]
    assert after["running"] == "SandboxNotFoundException"  # a clear not-found, never a 5xx
    assert after["full"] == "('kept', False)"  # paused in memory: its files were on disk
    assert "(in memory)" in after["full_lost"]
    assert after["files"] == "('kept', False)"

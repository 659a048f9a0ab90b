"""The unmodified E2B SDK, at each pinned version pair, against a live ``corral serve``."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import pytest

from tests.e2b.conftest import (
    KEY,
    ONE_SHOT_TIMEOUT_S,
    ROOT,
    SDK_PAIRS,
    Server,
    run_scenarios,
    sdk_python,
)

pytestmark = [pytest.mark.isolation, pytest.mark.network, pytest.mark.timeout(1500)]

_seen: dict[tuple[str, str], dict[str, Any]] = {}


@pytest.fixture(scope="module", params=SDK_PAIRS, ids=lambda pair: f"e2b-{pair[0]}")
def sdk(request: pytest.FixtureRequest, corral_server: Server) -> dict[str, Any]:
    """What the SDK saw in every scenario, run once per SDK pair."""
    pair: tuple[str, str] = request.param
    if pair not in _seen:
        _seen[pair] = run_scenarios(corral_server, *pair, skip=set())
    return _seen[pair]


def ok(sdk: dict[str, Any], name: str) -> dict[str, Any]:
    outcome = sdk[name]
    assert "ok" in outcome, f"{name} raised {outcome.get('raised')}: {outcome.get('traceback')}"
    value: dict[str, Any] = outcome["ok"]
    return value


def test_create_and_state_across_runs(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "create_and_state")
    assert len(seen["id"]) == 32  # 128 random bits, hex
    assert seen["stdout"] == "hello\n"
    assert seen["cwd"] == "'/home/user'"  # E2B's home is the working directory of code
    assert seen["stderr"] == ""
    assert seen["text"] == "42"
    assert seen["count"] == 2
    assert seen["running"] is True


def test_errors_are_the_execution_error(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "errors")
    assert (seen["name"], seen["value"]) == ("ZeroDivisionError", "division by zero")
    assert "Traceback" in seen["traceback"]
    assert seen["callback"] == ["ZeroDivisionError"]
    assert seen["stderr"] == ""  # a kernel reports the exception once, as the error
    assert seen["after"] == "'still here'"


def test_on_stdout_arrives_while_the_code_runs(sdk: dict[str, Any]) -> None:
    assert ok(sdk, "stdout_streams")["stdout"] == "ping\nstreamed\n"


def test_matplotlib_png_and_dataframe_html(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "rich_results")
    assert seen["png_magic"] == "89504e470d0a1a0a"
    assert seen["plot_main"] == [False]  # plt.show() displays; it is not the cell's value
    assert "<table" in seen["html"]
    assert seen["frame_main"] is True


def test_files_written_read_by_code_and_back(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "files_round_trip")
    assert seen["read_by_code"].startswith("'from the client|")
    assert seen["read_back"] == "from the code"
    assert seen["bytes_back"] == "0001ff"
    assert seen["names"] == ["data", "in.txt", "out.txt"]
    assert seen["missing"] == "FileNotFoundException"


def test_filesystem_service(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "filesystem")
    assert (seen["made"], seen["made_again"]) == (True, False)
    assert seen["listed"] == ["b.txt", "sub"]
    assert seen["exists"] is True
    assert seen["exists_after_remove"] is False
    assert seen["outside"] == "InvalidArgumentException"  # only /home/user is reachable


def test_commands_run_in_the_sandbox(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "commands")
    assert seen["exit_code"] == 0
    assert seen["stdout"] == "hi\n/home/user\nseen"  # envVars, the home, the session's files
    assert seen["stderr"] == "oops\n"
    assert seen["failed"] == {"exit_code": 3, "stderr": "bad\n"}  # CommandExitException
    assert seen["chunks"] == "one\ntwo\n"
    assert seen["listed_background"] is True
    assert seen["killed"] is True
    assert seen["ended"] == -1
    # holder, interpreter, bash and ps: the command shares the sandbox's pid namespace
    assert int(seen["pids"]) <= 5
    assert seen["code_sees_env"] == "'hi'"


def test_commands_outlive_their_stream(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "detached_commands")
    assert seen["first"] == "started\n"
    assert seen["listed_detached"] is True  # disconnect() left it running
    # Connect attaches from now on: what it printed while detached is not replayed (envd).
    assert seen["stdout"] == "got:hello\ndone\n"
    assert seen["exit_code"] == 0
    assert seen["listed_after"] is False
    assert seen["reconnect_ended"] == "NotFoundException"
    assert (seen["killed"], seen["gone"]) == (True, True)
    assert (seen["timed_end"], seen["timed_gone"]) == (-1, True)  # its Start's timeout
    if seen["streamed"] is not None:
        assert seen["streamed"] == "xy\n"  # StreamInput, in order


def test_stdin_nobody_reads_ends_at_its_deadline(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "stdin_nobody_reads")
    assert seen == {"sent": "TimeoutException", "killed": True, "after": "ok\n"}


def test_commands_end_with_their_sandbox(sdk: dict[str, Any]) -> None:
    assert ok(sdk, "commands_end_with_their_sandbox") == {"running": True, "gone": True}


def test_background_commands_meet_one_memory_wall(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "memory_wall")
    assert seen["memory_mb"] == 512
    assert 0 in seen["codes"]  # the wall stops the sum, not each command
    assert any(code != 0 for code in seen["codes"]), seen  # the kernel killed one of them


def test_run_code_timeout_ends_the_run(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "run_code_timeout")
    assert seen["raised"] == "TimeoutException"
    assert seen["after"] == "42"
    assert seen["ticks"] < 600  # the closed connection interrupted the loop


def test_a_timeout_interrupts_and_keeps_the_variables(sdk: dict[str, Any]) -> None:
    assert ok(sdk, "interrupt_keeps_state") == {
        "raised": "TimeoutException",
        "after": "42",
        "context_after": "'other context'",  # every context's state stays too
    }


def test_a_dropped_connection_interrupts_and_keeps_the_variables(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "disconnect_keeps_state")
    assert seen["seen"] == ["stdout"]
    assert seen["after"] == "42"


def test_code_ignoring_the_interrupt_is_restarted(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "interrupt_ignored_restarts")
    assert seen == {"raised": "TimeoutException", "lost": "NameError", "works": "42"}


def test_kill_and_kill_by_id_on_a_killed_sandbox(sdk: dict[str, Any]) -> None:
    assert ok(sdk, "kill") == {"killed": True, "killed_again": False, "running": False}


def test_set_timeout_get_info_list_connect(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "lifetime")
    assert seen["lifetime_before"] == pytest.approx(60, abs=1)
    assert seen["lifetime_after"] > 590
    assert seen["metadata"] == {"purpose": "test"}
    assert seen["state"] == "running"
    assert seen["listed"] is True
    assert seen["connected_runs"] == "4"


def test_two_sandboxes_share_nothing(sdk: dict[str, Any]) -> None:
    assert ok(sdk, "two_sandboxes") == {"other_error": "NameError", "other_file": False}


def test_contexts_are_separate_states(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "contexts")
    assert seen["in_context"] == "'context'"
    assert seen["context_cwd"] == "'/home/user/sub'"  # a context's cwd applies
    assert seen["in_default"] == "'default'"
    assert seen["back_in_context"] == "'context'"
    assert seen["listed"] is True
    assert seen["after_restart"] == "NameError"
    assert seen["removed"] is True


def test_two_contexts_run_side_by_side(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "contexts_at_once")
    assert seen["default"] == "(True, 'default', '/home/user')"
    assert seen["other"] == "(True, 'other', '/home/user/sub')"
    assert (seen["default_x"], seen["other_x"]) == ("'default'", "'other'")
    assert seen["env_after"] == "False"  # a run's envs are that run's only


def test_bash_runs_as_e2bs_bash_kernel(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "bash_contexts")

    def text(chunks: list[str]) -> str:  # stdout as it streamed, in chunks of any size
        return "".join(chunks)

    stdout, stderr, no_error = seen["first"]
    assert (text(stdout), stderr, no_error) == ("start\nto-stderr\n", [], True)  # as a pty
    assert text(seen["again"]) == "42 /tmp /home/user sandbox 1000\n"  # state lasts
    output, name, value = seen["failed"]
    assert (text(output), name, value) == ("before\n", "", "1")
    assert text(seen["quoted"]) == "a  b it's ü\n$x\n"
    assert seen["traced"] == [True, True]  # its own trace never ends a run early
    assert text(seen["shadowed"]) == "shadowed\n"  # nor functions named as its commands
    assert text(seen["after_trace"]) == "after\n"  # and no status is left for a later run
    assert seen["bad_name"] is True
    assert text(seen["envs"]) == "only-this-run\n"
    assert text(seen["after"]) == "[unset] sandbox\n"  # a run's envs are that run's only
    language, separate = seen["own"]
    assert (language, text(separate)) == ("bash", "[unset] /home/user\n")
    assert seen["job_gone"] == "True"  # a removed context's shell takes its jobs along
    assert seen["exited"] == "3"
    assert text(seen["fresh"]) == "[unset]\n"  # a shell that exited starts afresh
    assert text(seen["python"]) == "still python\n"
    assert seen["languages"] == ["bash", "python"]  # its own context was removed
    assert seen["javascript"] is True  # a 400 naming what is served


def test_wrong_key_template_and_another_keys_sandbox_are_refused(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "refusals")
    assert seen["wrong_key"] == "AuthenticationException"
    assert "template 'some-other-template' not found" in seen["template"]
    assert seen["other_key_connect"] == "SandboxNotFoundException"
    assert seen["other_key_kill"] is False
    assert seen["still_running"] == "'alive'"


def test_another_sandboxs_token_or_none_is_refused_and_nothing_runs(
    sdk: dict[str, Any],
) -> None:
    seen = ok(sdk, "access_tokens")
    assert set(seen["statuses"].values()) == {401}, seen["statuses"]
    assert seen["ran"] is False
    assert seen["uploaded"] is False


def test_code_shell_and_pip_are_one_python(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "one_runtime")
    assert seen["shell"].startswith("pandas\nPython 3.")
    assert seen["installed"] == "42", seen["installed_error"]
    assert seen["failed"] == "CalledProcessError"
    assert seen["failed_printed"] is False
    assert seen["magic"] == "CalledProcessError"
    assert seen["home"] == "'/home/user'"
    assert seen["home_file"] == "here"


def test_a_run_past_the_one_shot_default_completes(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "long_run")
    assert seen["text"] == "'done'", seen
    assert seen["error"] is None
    assert seen["seconds"] > ONE_SHOT_TIMEOUT_S  # it outlived the one-shot default


def test_get_metrics_reads_the_sandboxs_cgroup(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "metrics")
    assert seen["count"] >= 1
    assert seen["cpu_count"] == 1
    assert seen["cpu_used_pct"] > 0
    assert 0 < seen["mem_used"] < seen["mem_total"]
    assert seen["mem_total"] == 512 << 20
    assert seen["disk_total"] > 0


def test_signed_file_urls(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "signed_urls")
    assert seen["header_free"] is True
    assert seen["download"] == [200, "signed content"]
    assert seen["upload"] == [200, "uploaded by url"]
    assert seen["expired"] == 401
    assert seen["tampered"] == 401
    assert seen["read_as_write"] == 401
    assert seen["unchanged"] == "signed content"


def test_root_and_a_missing_context_folder_are_refused(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "refused_user_and_cwd")
    assert "no root" in seen["root"]
    assert "not a folder" in seen["cwd"]
    assert seen["user_ok"] == "sandbox"  # the sandbox's one user: uid 1000, named sandbox


def test_charts_and_plotly_html(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "charts")
    assert seen["bar"] == ["bar", "Bars"]
    assert seen["line"] == ["line", ""] or seen["line"] == ["line", None]
    assert seen["bar_png"] is True
    assert seen["line_png"] is True
    assert seen["plotly_html"] is True, seen["plotly_error"]


def test_sandboxes_that_wait_do_not_hold_the_host(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "sandboxes_waiting_at_once")
    assert seen["started_before_go"] == 4  # capacity is 2: waiting runs hold no slot
    assert seen["answers"] == ["True"] * 4


def test_the_async_sdk(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "async_sdk")
    assert seen["slept"] == "'woke'"
    assert seen["samples"] >= 1
    assert seen["fetched"] == "async"
    assert seen["root"] != "no error"


def test_isolation_holds_in_e2b_sandboxes(sdk: dict[str, Any], corral_server: Server) -> None:
    seen = ok(sdk, "isolation")
    assert seen["network"] != "connected"  # not even the server on the host's loopback
    names, values, sees_server_data, proc = seen["probe"]
    assert sees_server_data is False
    assert "SANDBOX_ONLY" in names  # envVars reach the sandbox's processes
    assert not any(name.startswith(("CORRAL_", "E2B_")) for name in names)
    assert seen["server_key_in_env"] is False
    assert not any(KEY in value for value in values)
    assert "SEES-HOST-DATA" not in seen["shell"]
    assert "SANDBOX_ONLY=yes" in seen["shell"]
    pids = [p for p in proc if p.isdigit()]
    assert "1" in pids
    assert len(pids) <= 5  # its own pid namespace: no host process is visible


def test_the_readme_example_runs(corral_server: Server) -> None:
    readme = (ROOT / "README.md").read_text().split("## Use corral from the E2B SDK", 1)[1]
    match = re.search(r"```python\n(.*?)```", readme, re.DOTALL)
    assert match is not None
    example = match.group(1)
    assert len(example.strip().splitlines()) == 5
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "CORRAL_"))}
    env.update(E2B_API_URL=corral_server.url, E2B_SANDBOX_URL=corral_server.url, E2B_API_KEY=KEY)
    done = subprocess.run(
        [str(sdk_python(*SDK_PAIRS[0])), "-c", example],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "42"


def test_ports_reach_a_server_in_the_sandbox(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "ports")
    assert seen["host"] == f"8000-{seen['id']}.127.0.0.1:{seen['host'].rsplit(':', 1)[1]}"
    assert seen["token"] is True  # not public: create answered a traffic access token
    assert seen["by_host"] == [200, "hello from the sandbox"]
    assert seen["by_headers"] == [200, "hello from the sandbox"]
    assert seen["inside"] == "'hello from the sandbox'"  # the same server, from the code
    assert seen["no_token"] == 403
    assert seen["wrong_token"] == 403  # another sandbox's token opens nothing here
    status, body = seen["closed"]
    assert status == 502
    assert body == {"code": 502, "message": "The sandbox is running but port is not open",
                    "sandboxId": seen["id"], "port": 8001}  # fmt: skip
    assert seen["missing"] == 502


def test_port_proxy_believes_no_server_and_hands_it_no_secret(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "ports")
    assert seen["garbage"] == [502, "the sandbox's server sent no valid HTTP response"]
    assert seen["head_has_host"] is True  # the client's Host goes in
    assert seen["head_has_secret"] is False  # the traffic token and envd's never do


def test_websocket_through_a_port(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "ports")
    assert seen["echo"] == {"status": 101, "protocol": "echo.v1", "echo": "tekcosbew olleh"}
    assert seen["ws_no_token"] == {"status": 403}


def test_public_sandbox_needs_no_traffic_token(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "ports")
    assert seen["public_token"] is None
    assert seen["public"] == [200, "public page"]


def test_pty_runs_bash_interactively(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "pty")
    assert seen["answered"] is True  # a command typed at bash, its output on the terminal
    assert seen["tty"] is True  # bash's stdin is a terminal of the sandbox's own devpts
    assert seen["devpts"] == ["devpts", "0", "ptmx"]  # a new instance: its one pty, numbered 0
    assert seen["first_size"] is True  # the size it was created with
    assert seen["resized"] is True  # stty sees the new size
    assert seen["killed"] is True
    assert seen["ended"] == "ended"  # its stream ends with it
    assert seen["still_listed"] is False


def test_watch_dir_sees_files_made_by_code(sdk: dict[str, Any]) -> None:
    seen = ok(sdk, "watch_dir")
    assert seen["flat"][:2] == [["made.txt", "create"], ["made.txt", "write"]]
    assert ["deep/new", "create"] in seen["recursive"]
    assert ["deep/new/x.txt", "create"] in seen["recursive"]  # made before its folder's watch
    assert seen["missing"].startswith("FileNotFoundException")
    assert seen["async"][:2] == [["async.txt", "create"], ["async.txt", "write"]]


SMOLAGENTS = "smolagents==1.26.0"
SMOLAGENTS_RUN = """
import os, sys
from smolagents.default_tools import FinalAnswerTool
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import E2BExecutor
executor = E2BExecutor([], AgentLogger(level=LogLevel.OFF))
executor.send_tools({"final_answer": FinalAnswerTool()})  # runs `!pip install ...` first
first = executor("x = 2\\nprint('thinking')\\nx * 3")
final = executor("final_answer(x * 21)")
print(repr([first.output, first.logs, first.is_final_answer, final.output, final.is_final_answer]))
executor.cleanup()
"""


SMOLAGENTS_IMPORTS = """
from smolagents.default_tools import FinalAnswerTool
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import E2BExecutor
executor = E2BExecutor(["corral_test_pkg"], AgentLogger(level=LogLevel.OFF))  # !pip install
executor.send_tools({"final_answer": FinalAnswerTool()})
imported = executor("import corral_test_pkg\\ncorral_test_pkg.VALUE")
executor.cleanup()
try:
    E2BExecutor(["no-such-package-anywhere"], AgentLogger(level=LogLevel.OFF))
    refused = "installed"
except Exception as exc:  # smolagents raises what the failed `!pip` reported
    refused = type(exc).__name__
print(repr([imported.output, refused]))
"""


def test_smolagents_additional_imports_install_or_fail(corral_server: Server) -> None:
    """smolagents' ``additional_imports``: its ``!pip install`` of a package the sandbox can
    reach (the server's wheelhouse) is importable by the agent's code; one that cannot be
    installed fails the executor's start instead of leaving an agent that believes it."""
    python = sdk_python(*SDK_PAIRS[0], SMOLAGENTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "CORRAL_"))}
    env.update(E2B_API_URL=corral_server.url, E2B_SANDBOX_URL=corral_server.url, E2B_API_KEY=KEY)
    done = subprocess.run(
        [str(python), "-c", SMOLAGENTS_IMPORTS],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "['42', 'AgentError']"


def test_smolagents_e2b_executor_unmodified(corral_server: Server) -> None:
    """A third-party user of the SDK: smolagents' E2BExecutor, as its agents drive it."""
    python = sdk_python(*SDK_PAIRS[0], SMOLAGENTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "CORRAL_"))}
    env.update(E2B_API_URL=corral_server.url, E2B_SANDBOX_URL=corral_server.url, E2B_API_KEY=KEY)
    done = subprocess.run(
        [str(python), "-c", SMOLAGENTS_RUN],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "['6', 'thinking\\n', False, 42, True]"

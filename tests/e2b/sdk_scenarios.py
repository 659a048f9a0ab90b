"""The E2B SDK's calls against a live ``corral serve``: run by a venv holding one SDK version.

Usage: ``python sdk_scenarios.py BASE_URL KEY OTHER_KEY SERVER_DATA_DIR``. Prints one JSON
object: for each scenario, what the SDK saw (or the exception it raised), for the tests to
judge. Imports nothing of corral: it is the unmodified SDK speaking to the server.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import json
import os
import select
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

BASE, KEY, OTHER_KEY, SERVER_DATA = sys.argv[1:5]
os.environ.update(E2B_API_URL=BASE, E2B_SANDBOX_URL=BASE, E2B_API_KEY=KEY)

import httpx  # noqa: E402
from e2b_code_interpreter import Sandbox  # noqa: E402

from e2b import CommandExitException  # noqa: E402

WAIT_S = 20  # bound of the waits inside sandboxed code

RESULTS: dict[str, Any] = {}


def scenario(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> None:
        try:
            RESULTS[fn.__name__] = {"ok": fn()}
        except Exception as exc:  # noqa: BLE001 - the test judges what was raised
            RESULTS[fn.__name__] = {
                "raised": type(exc).__name__,
                "message": str(exc)[:500],
                "traceback": traceback.format_exc()[-2000:],
            }

    run.__name__ = fn.__name__
    SCENARIOS.append(run)
    return fn


SCENARIOS: list[Callable[[], None]] = []


@scenario
def create_and_state() -> dict[str, Any]:
    with Sandbox.create() as sbx:
        first = sbx.run_code("x = 41\nprint('hello')")
        second = sbx.run_code("x + 1")
        cwd = sbx.run_code("import os\nos.getcwd()")
        return {
            "cwd": cwd.text,
            "id": sbx.sandbox_id,
            "stdout": "".join(first.logs.stdout),
            "stderr": "".join(first.logs.stderr),
            "text": second.text,
            "count": second.execution_count,
            "running": sbx.is_running(),
        }


@scenario
def errors() -> dict[str, Any]:
    with Sandbox.create() as sbx:
        seen: list[str] = []
        execution = sbx.run_code("1 / 0", on_error=lambda e: seen.append(e.name))
        after = sbx.run_code("'still here'")
        error = execution.error
        return {
            "name": error.name,
            "value": error.value,
            "traceback": error.traceback,
            "callback": seen,
            "stderr": "".join(execution.logs.stderr),
            "after": after.text,
        }


@scenario
def stdout_streams() -> dict[str, Any]:
    """The callback gets 'ping' while the code still runs: the code waits for its answer."""
    with Sandbox.create() as sbx:
        answered = threading.Event()

        def on_stdout(message: Any) -> None:
            if "ping" in message.line and not answered.is_set():
                sbx.files.write("/home/user/pong", "pong")
                answered.set()

        code = (
            "import os, time\n"
            "print('ping', flush=True)\n"
            f"deadline = time.monotonic() + {WAIT_S}\n"
            "while not os.path.exists('pong') and time.monotonic() < deadline:\n"
            "    time.sleep(0.01)\n"
            "print('streamed' if os.path.exists('pong') else 'not streamed')\n"
        )
        execution = sbx.run_code(code, on_stdout=on_stdout)
        return {"stdout": "".join(execution.logs.stdout)}


@scenario
def rich_results() -> dict[str, Any]:
    with Sandbox.create() as sbx:
        plot = sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
        frame = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
        pngs = [r.png for r in plot.results if r.png]
        return {
            "png_magic": base64.b64decode(pngs[0])[:8].hex() if pngs else None,
            "plot_main": [r.is_main_result for r in plot.results],
            "html": frame.results[0].html if frame.results else None,
            "frame_main": frame.results[0].is_main_result if frame.results else None,
        }


@scenario
def files_round_trip() -> dict[str, Any]:
    with Sandbox.create() as sbx:
        sbx.files.write("/home/user/in.txt", "from the client")
        sbx.files.write("data/blob.bin", b"\x00\x01\xff")
        read_by_code = sbx.run_code("import os\nopen('in.txt').read() + '|' + os.getcwd()")
        sbx.run_code("open('out.txt', 'w').write('from the code')")
        names = sorted(e.name for e in sbx.files.list("/home/user"))
        missing = None
        try:
            sbx.files.read("/home/user/nope.txt")
        except Exception as exc:  # noqa: BLE001
            missing = type(exc).__name__
        return {
            "read_by_code": read_by_code.text,
            "read_back": sbx.files.read("/home/user/out.txt"),
            "bytes_back": bytes(sbx.files.read("data/blob.bin", format="bytes")).hex(),
            "names": names,
            "missing": missing,
        }


@scenario
def filesystem() -> dict[str, Any]:
    with Sandbox.create() as sbx:
        made = sbx.files.make_dir("/home/user/dir/sub")
        made_again = sbx.files.make_dir("/home/user/dir/sub")
        sbx.files.write("/home/user/dir/sub/a.txt", "a")
        sbx.files.rename("/home/user/dir/sub/a.txt", "/home/user/dir/b.txt")
        listed = sorted(e.name for e in sbx.files.list("/home/user/dir"))
        exists = sbx.files.exists("/home/user/dir/b.txt")
        sbx.files.remove("/home/user/dir")
        exists_after_remove = sbx.files.exists("/home/user/dir")
        outside = None
        try:
            sbx.files.read("/etc/passwd")
        except Exception as exc:  # noqa: BLE001
            outside = type(exc).__name__
        return {
            "made": made,
            "made_again": made_again,
            "listed": listed,
            "exists": exists,
            "exists_after_remove": exists_after_remove,
            "outside": outside,
        }


@scenario
def commands() -> dict[str, Any]:
    with Sandbox.create(envs={"GREETING": "hi"}) as sbx:
        sbx.files.write("/home/user/seen.txt", "seen")
        result = sbx.commands.run("echo $GREETING; pwd; cat seen.txt; echo oops >&2")
        failed: dict[str, Any] = {}
        try:
            sbx.commands.run("echo bad >&2; exit 3")
        except CommandExitException as exc:
            failed = {"exit_code": exc.exit_code, "stderr": exc.stderr}
        chunks: list[str] = []
        sbx.commands.run("echo one; echo two", on_stdout=chunks.append)
        background = sbx.commands.run("sleep 60", background=True)
        listed = [p.pid for p in sbx.commands.list()]
        killed = background.kill()
        try:
            background.wait()
            ended: Any = "exited"
        except CommandExitException as exc:
            ended = exc.exit_code
        pids = sbx.commands.run("ps -e -o pid= | wc -l").stdout.strip()
        code_sees = sbx.run_code("import os\nos.environ.get('GREETING')").text
        return {
            "exit_code": result.exit_code,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "failed": failed,
            "chunks": "".join(chunks),
            "listed_background": background.pid in listed,
            "killed": killed,
            "ended": ended,
            "pids": pids,
            "code_sees_env": code_sees,
        }


def _shell_wait(condition: str) -> str:
    """A shell loop inside the sandbox waiting, bounded, until ``condition`` holds."""
    bound = WAIT_S * 20
    return f"n=0; until {condition} || [ $n -ge {bound} ]; do sleep 0.05; n=$((n+1)); done"


@scenario
def detached_commands() -> dict[str, Any]:
    """A command outlives its stream: disconnect, list, connect again, send stdin, kill."""
    with Sandbox.create() as sbx:
        script = "; ".join([
            "echo started",
            _shell_wait("[ -e go ]"),
            "echo while-detached",
            "touch went",
            "read line",
            "echo got:$line",
            _shell_wait("[ -e stop ]"),
            "echo done",
        ])  # fmt: skip
        handle = sbx.commands.run(script, background=True, stdin=True, timeout=0)
        first = next(iter(handle))[0]
        handle.disconnect()
        listed_detached = handle.pid in [p.pid for p in sbx.commands.list()]
        sbx.files.write("/home/user/go", "")
        sbx.commands.run(_shell_wait("[ -e went ]"))  # it printed while nobody was attached
        again = sbx.commands.connect(handle.pid)
        sbx.commands.send_stdin(handle.pid, "hello\n")
        sbx.files.write("/home/user/stop", "")
        result = again.wait()
        listed_after = handle.pid in [p.pid for p in sbx.commands.list()]
        try:
            sbx.commands.connect(handle.pid)
            reconnect_ended: Any = "connected"
        except Exception as exc:  # noqa: BLE001
            reconnect_ended = type(exc).__name__
        sleeper = sbx.commands.run("sleep 600", background=True, timeout=0)
        killed = sbx.commands.kill(sleeper.pid)
        with contextlib.suppress(CommandExitException):  # killed: it exits with -1
            sleeper.wait()
        gone = sleeper.pid not in [p.pid for p in sbx.commands.list()]
        timed = sbx.commands.run("sleep 600", background=True, timeout=1)
        timed.disconnect()
        try:  # attached again, with a longer bound of its own: it ends at its Start's
            timed_end: Any = sbx.commands.connect(timed.pid, timeout=WAIT_S).wait().exit_code
        except CommandExitException as exc:
            timed_end = exc.exit_code
        timed_gone = timed.pid not in [p.pid for p in sbx.commands.list()]
        streamed = None
        if hasattr(sbx.commands, "stream_input"):  # newer SDKs only
            reader = sbx.commands.run("read a; read b; echo $a$b", background=True, stdin=True)
            sbx.commands.stream_input(reader.pid, ["x\n", b"y\n"])
            streamed = reader.wait().stdout
        return {
            "first": first,
            "listed_detached": listed_detached,
            "stdout": result.stdout,
            "exit_code": result.exit_code,
            "listed_after": listed_after,
            "reconnect_ended": reconnect_ended,
            "killed": killed,
            "gone": gone,
            "timed_end": timed_end,
            "timed_gone": timed_gone,
            "streamed": streamed,
        }


@scenario
def stdin_nobody_reads() -> dict[str, Any]:
    """Input a command never reads fills its pipe: the call ends at its deadline, and the
    sandbox goes on (the command can still be killed, others started)."""
    with Sandbox.create() as sbx:
        deaf = sbx.commands.run("sleep 600", background=True, stdin=True, timeout=0)
        try:
            sbx.commands.send_stdin(deaf.pid, "x" * (256 << 10), request_timeout=1)
            sent: Any = "sent"
        except Exception as exc:  # noqa: BLE001
            sent = type(exc).__name__
        killed = sbx.commands.kill(deaf.pid)
        return {"sent": sent, "killed": killed, "after": sbx.commands.run("echo ok").stdout}


def _host_pid(marker: str) -> int | None:
    """The host pid of the sandboxed ``sleep MARKER``, seen from outside the sandbox."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if cmdline.read() == f"sleep\0{marker}\0".encode():
                        return int(entry)
            except OSError:
                continue
    return None


@scenario
def commands_end_with_their_sandbox() -> dict[str, Any]:
    marker = f"{600 + os.getpid() % 1000}.{time.time_ns() % 1000000}"
    sbx = Sandbox.create()
    handle = sbx.commands.run(f"exec sleep {marker}", background=True, timeout=0)
    handle.disconnect()
    # Inside the sandbox, until the exec has happened (bash's own cmdline names it too).
    sbx.commands.run(_shell_wait(f"[ \"$(tr '\\0' ' ' < /proc/{handle.pid}/cmdline)\" = "
                                 f"'sleep {marker} ' ]"))  # fmt: skip
    pid = _host_pid(marker)
    if pid is None:
        return {"running": False}
    pidfd = os.pidfd_open(pid)
    try:
        sbx.kill()
        ended, _, _ = select.select([pidfd], [], [], WAIT_S)  # readable once it has exited
    finally:
        os.close(pidfd)
    return {"running": True, "gone": bool(ended)}


@scenario
def run_code_timeout() -> dict[str, Any]:
    """The SDK's timeout closes the connection; that interrupts the run, as in E2B."""
    with Sandbox.create() as sbx:
        raised = None
        try:
            sbx.run_code(
                "import time\nfor _ in range(600):\n    time.sleep(0.1)\n"
                "    open('ticks', 'a').write('x')",
                timeout=1,
            )
        except Exception as exc:  # noqa: BLE001
            raised = type(exc).__name__
        # Runs are serialised: had the loop gone on, this would wait for all 600 ticks.
        after = sbx.run_code("6 * 7").text
        ticks = len(sbx.files.read("/home/user/ticks")) if sbx.files.exists("ticks") else 0
        return {"raised": raised, "after": after, "ticks": ticks}


@scenario
def interrupt_keeps_state() -> dict[str, Any]:
    """As E2B's Jupyter kernel: a timed-out run is interrupted; the variables stay."""
    with Sandbox.create() as sbx:
        sbx.run_code("x = 41")
        context = sbx.create_code_context()
        sbx.run_code("y = 'other context'", context=context)
        raised = None
        try:
            sbx.run_code("while True:\n    pass", timeout=1)
        except Exception as exc:  # noqa: BLE001
            raised = type(exc).__name__
        return {
            "raised": raised,
            "after": sbx.run_code("x + 1").text,
            "context_after": sbx.run_code("y", context=context).text,
        }


@scenario
def disconnect_keeps_state() -> dict[str, Any]:
    """The client dropping the connection mid-run interrupts it the same way."""
    with Sandbox.create() as sbx:
        sbx.run_code("x = 41")
        headers = {
            "E2b-Sandbox-Id": sbx.sandbox_id,
            "E2b-Sandbox-Port": "49999",
            "X-Access-Token": sbx._envd_access_token or "",
        }
        code = "print('spinning', flush=True)\nwhile True:\n    pass"
        seen = []
        with httpx.stream(
            "POST", f"{BASE}/execute", json={"code": code}, headers=headers, timeout=WAIT_S
        ) as reply:
            for line in reply.iter_lines():
                seen.append(json.loads(line).get("type"))
                if "spinning" in line:
                    break  # leaving the block closes the connection
        return {"seen": seen, "after": sbx.run_code("x + 1").text}


@scenario
def interrupt_ignored_restarts() -> dict[str, Any]:
    """Code that ignores SIGINT cannot hold the sandbox: it is restarted, state lost."""
    with Sandbox.create() as sbx:
        sbx.run_code("x = 41")
        raised = None
        try:
            sbx.run_code(
                "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                "while True:\n    pass",
                timeout=1,
            )
        except Exception as exc:  # noqa: BLE001
            raised = type(exc).__name__
        lost = sbx.run_code("x")
        return {
            "raised": raised,
            "lost": lost.error.name if lost.error else lost.text,
            "works": sbx.run_code("6 * 7").text,
        }


@scenario
def kill() -> dict[str, Any]:
    sbx = Sandbox.create()
    sandbox_id = sbx.sandbox_id
    killed = sbx.kill()
    return {
        "killed": killed,
        "killed_again": Sandbox.kill(sandbox_id),
        "running": sbx.is_running(),
    }


@scenario
def lifetime() -> dict[str, Any]:
    with Sandbox.create(timeout=60, metadata={"purpose": "test"}) as sbx:
        before = sbx.get_info()
        sbx.set_timeout(600)
        after = sbx.get_info()
        paginator = Sandbox.list()
        listed = [s.sandbox_id for s in paginator.next_items()]
        again = Sandbox.connect(sbx.sandbox_id)
        return {
            "lifetime_before": (before.end_at - before.started_at).total_seconds(),
            "lifetime_after": (after.end_at - after.started_at).total_seconds(),
            "metadata": after.metadata,
            "state": str(after.state.value),
            "listed": sbx.sandbox_id in listed,
            "connected_runs": again.run_code("2 + 2").text,
        }


@scenario
def two_sandboxes() -> dict[str, Any]:
    with Sandbox.create() as one, Sandbox.create() as two:
        one.run_code("secret = 'one'")
        one.files.write("/home/user/mine.txt", "one")
        other = two.run_code("secret")
        return {
            "other_error": other.error.name if other.error else None,
            "other_file": two.files.exists("/home/user/mine.txt"),
        }


@scenario
def contexts() -> dict[str, Any]:
    with Sandbox.create() as sbx:
        sbx.run_code("where = 'default'")
        sbx.files.make_dir("/home/user/sub")
        context = sbx.create_code_context(cwd="/home/user/sub")
        in_context = sbx.run_code("where = 'context'\nwhere", context=context)
        context_cwd = sbx.run_code("import os\nos.getcwd()", context=context).text
        in_default = sbx.run_code("where")
        back_in_context = sbx.run_code("where", context=context)
        listed = [c.id for c in sbx.list_code_contexts()]
        sbx.restart_code_context(context)
        after_restart = sbx.run_code("where", context=context)
        sbx.remove_code_context(context)
        gone = [c.id for c in sbx.list_code_contexts()]
        return {
            "in_context": in_context.text,
            "context_cwd": context_cwd,
            "in_default": in_default.text,
            "back_in_context": back_in_context.text,
            "listed": context.id in listed,
            "after_restart": after_restart.error.name if after_restart.error else None,
            "removed": context.id not in gone,
        }


@scenario
def refusals() -> dict[str, Any]:
    found: dict[str, Any] = {}
    try:
        Sandbox.create(api_key="e2b_" + "0" * 40)
        found["wrong_key"] = "created"
    except Exception as exc:  # noqa: BLE001
        found["wrong_key"] = type(exc).__name__
    try:
        Sandbox.create(template="some-other-template")
        found["template"] = "created"
    except Exception as exc:  # noqa: BLE001
        found["template"] = f"{type(exc).__name__}: {exc}"
    with Sandbox.create() as mine:
        try:
            Sandbox.connect(mine.sandbox_id, api_key=OTHER_KEY)
            found["other_key_connect"] = "connected"
        except Exception as exc:  # noqa: BLE001
            found["other_key_connect"] = type(exc).__name__
        found["other_key_kill"] = Sandbox.kill(mine.sandbox_id, api_key=OTHER_KEY)
        found["still_running"] = mine.run_code("'alive'").text
    return found


@scenario
def access_tokens() -> dict[str, Any]:
    """Another sandbox's token, or none, is refused and nothing runs."""
    with Sandbox.create() as target, Sandbox.create() as other:
        other_token = other._envd_access_token
        code = "open('/home/user/ran.txt', 'w').write('ran')"
        statuses: dict[str, int] = {}
        for name, token in (("other_token", other_token), ("no_token", None)):
            headers = {"E2b-Sandbox-Id": target.sandbox_id, "E2b-Sandbox-Port": "49999"}
            if token:
                headers["X-Access-Token"] = token
            reply = httpx.post(f"{BASE}/execute", json={"code": code}, headers=headers)
            statuses[name] = reply.status_code
            envd = {**headers, "E2b-Sandbox-Port": "49983"}
            upload = httpx.post(
                f"{BASE}/files", params={"path": "x.txt"}, files={"file": b"x"}, headers=envd
            )
            statuses[name + "_upload"] = upload.status_code
            rpc = httpx.post(
                f"{BASE}/filesystem.Filesystem/ListDir",
                json={"path": "/home/user"},
                headers={**envd, "Content-Type": "application/json"},
            )
            statuses[name + "_rpc"] = rpc.status_code
        return {
            "statuses": statuses,
            "ran": target.files.exists("/home/user/ran.txt"),
            "uploaded": target.files.exists("/home/user/x.txt"),
        }


@scenario
def isolation() -> dict[str, Any]:
    host = httpx.URL(BASE).host
    port = httpx.URL(BASE).port
    with Sandbox.create(envs={"SANDBOX_ONLY": "yes"}) as sbx:
        network = sbx.run_code(
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(({host!r}, {port}), timeout=2)\n"
            "    reached = 'connected'\n"
            "except OSError as exc:\n"
            "    reached = type(exc).__name__\n"
            "reached\n"
        )
        probe = sbx.run_code(
            "import json, os\n"
            "json.dumps([sorted(os.environ), list(os.environ.values()),"
            f" os.path.exists({SERVER_DATA!r}), sorted(os.listdir('/proc'))[:50]])"
        )
        shell = sbx.commands.run(f"env; test -e {SERVER_DATA} && echo SEES-HOST-DATA; ls /proc")
        shell_env = shell.stdout
        return {
            "network": network.text,
            "probe": json.loads(ast.literal_eval(probe.text)) if probe.text else probe.error.value,
            "shell": shell_env,
            "server_key_in_env": KEY in shell_env or KEY in (probe.text or ""),
        }


SKIP = set(os.environ.get("E2B_SCENARIOS_SKIP", "").split(","))
for run in SCENARIOS:
    if run.__name__ not in SKIP:
        run()
print(json.dumps(RESULTS))

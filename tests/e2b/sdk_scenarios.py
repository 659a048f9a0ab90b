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
from collections.abc import Callable
from pathlib import Path
from typing import Any

BASE, KEY, OTHER_KEY, SERVER_DATA = sys.argv[1:5]
os.environ.update(E2B_API_URL=BASE, E2B_SANDBOX_URL=BASE, E2B_API_KEY=KEY)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: its tests package

import httpx  # noqa: E402
from e2b_code_interpreter import Sandbox  # noqa: E402

from e2b import CommandExitException  # noqa: E402
from tests.e2b.scenariokit import finish, scenario  # noqa: E402

WAIT_S = 20  # bound of the waits inside sandboxed code


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


HOLD = """\
import os, time
block = bytearray(200 << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
print("held", flush=True)
end = time.time() + 20
while not os.path.exists("/home/user/go") and time.time() < end:
    time.sleep(0.05)
"""


@scenario
def memory_wall() -> dict[str, Any]:
    # Three background commands of 200 MB each, past the sandbox's 512 MB: each alone is
    # under it, so only a wall for the sandbox as a whole stops them.
    with Sandbox.create() as sbx:
        sbx.files.write("hold.py", HOLD)
        guard = sbx.commands.run("ls /proc | grep -c '^[0-9]'").stdout.strip()
        if int(guard) > 12:  # its own pid namespace: a few processes, never the host's
            raise RuntimeError("refusing to fill memory outside a corral sandbox")
        handles = [sbx.commands.run("python3 hold.py", background=True) for _ in range(3)]
        held = []
        for handle in handles:
            said = ""
            with contextlib.suppress(Exception):  # a killed command's stream ends early
                for out, _err, _pty in handle:
                    said += out or ""
                    if "held" in said:
                        break
            held.append("held" in said)
        sbx.files.write("go", "")
        codes = []
        for handle in handles:
            try:
                codes.append(handle.wait().exit_code)
            except CommandExitException as exc:
                codes.append(exc.exit_code)
        return {"memory_mb": sbx.get_info().memory_mb, "codes": codes, "held": held}


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


def _raised(call: Callable[[], Any]) -> str:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test judges what was raised
        return f"{type(exc).__name__}: {exc}"
    return "no error"


@scenario
def one_runtime() -> dict[str, Any]:
    """The code, the shell and pip are one Python; a failed install is an error."""
    with Sandbox.create() as sbx:
        shell = sbx.commands.run("python3 -c 'import pandas; print(pandas.__name__)'; python -V")
        installed = sbx.run_code(
            "!pip install -q corral_test_pkg\nimport corral_test_pkg\ncorral_test_pkg.VALUE"
        )
        failed = sbx.run_code("!pip install -q corral-nowhere-to-be-found\nprint('not reached')")
        magic = sbx.run_code("%pip install -q corral-nowhere-to-be-found")
        home = sbx.run_code(
            "import os, pathlib\n(pathlib.Path.home() / 'from-code.txt').write_text('here')\n"
            "os.environ['HOME']"
        )
        return {
            "shell": shell.stdout,
            "installed": installed.text,
            "installed_error": None if installed.error is None else installed.error.value,
            "failed": None if failed.error is None else failed.error.name,
            "failed_printed": "not reached" in "".join(failed.logs.stdout),
            "magic": None if magic.error is None else magic.error.name,
            "home": home.text,
            "home_file": sbx.files.read("/home/user/from-code.txt"),
        }


@scenario
def long_run() -> dict[str, Any]:
    """Past the server's one-shot default (10 s, tests/e2b/conftest.py): the SDK's own
    timeout (300 s) bounds it."""
    with Sandbox.create() as sbx:
        started = time.monotonic()
        done = sbx.run_code("import time\ntime.sleep(12)\n'done'")
        return {"text": done.text, "error": done.error and done.error.name,
                "seconds": time.monotonic() - started}  # fmt: skip


@scenario
def metrics() -> dict[str, Any]:
    with Sandbox.create() as sbx:
        sbx.run_code("sum(i * i for i in range(3_000_000))")
        samples = sbx.get_metrics()
        last = samples[-1]
        return {
            "count": len(samples),
            "cpu_used_pct": last.cpu_used_pct,
            "cpu_count": last.cpu_count,
            "mem_used": last.mem_used,
            "mem_total": last.mem_total,
            "disk_total": last.disk_total,
        }


@scenario
def signed_urls() -> dict[str, Any]:
    with Sandbox.create() as sbx:
        sbx.files.write("/home/user/signed.txt", "signed content")
        url = sbx.download_url("/home/user/signed.txt")
        plain = httpx.get(url)
        upload = sbx.upload_url("/home/user/up.txt")
        sent = httpx.post(upload, files={"file": ("up.txt", b"uploaded by url")})
        expired = httpx.get(sbx.download_url("/home/user/signed.txt", use_signature_expiration=-5))
        tampered = httpx.get(url.replace("signed.txt", "up.txt"))
        read_as_write = httpx.post(
            url, files={"file": ("signed.txt", b"overwritten")}
        )  # a read signature does not write
        return {
            "header_free": "E2b-Sandbox-Id" not in url,
            "download": [plain.status_code, plain.text],
            "upload": [sent.status_code, sbx.files.read("/home/user/up.txt")],
            "expired": expired.status_code,
            "tampered": tampered.status_code,
            "read_as_write": read_as_write.status_code,
            "unchanged": sbx.files.read("/home/user/signed.txt"),
        }


@scenario
def refused_user_and_cwd() -> dict[str, Any]:
    with Sandbox.create() as sbx:
        return {
            "root": _raised(lambda: sbx.commands.run("id", user="root")),
            "cwd": _raised(lambda: sbx.create_code_context(cwd="/no/such/folder")),
            "user_ok": sbx.commands.run("id -un", user="user").stdout.strip(),
        }


@scenario
def charts() -> dict[str, Any]:
    with Sandbox.create() as sbx:
        bar = sbx.run_code(
            "import matplotlib.pyplot as plt\n"
            "plt.bar(['a', 'b'], [3, 5])\nplt.title('Bars')\nplt.show()"
        )
        line = sbx.run_code(
            "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [2, 4, 1])\nplt.show()"
        )
        plotly = sbx.run_code("import plotly.express as px\npx.bar(x=['a', 'b'], y=[1, 2]).show()")
        found: dict[str, Any] = {}
        for name, execution in (("bar", bar), ("line", line)):
            chart = execution.results[0].chart if execution.results else None
            kind = None if chart is None else getattr(chart.type, "value", chart.type)
            found[name] = None if chart is None else [kind, chart.title]
            found[f"{name}_png"] = bool(execution.results and execution.results[0].png)
        html = plotly.results[0].html if plotly.results else None
        found["plotly_html"] = bool(html and "plotly" in html.lower())
        found["plotly_error"] = None if plotly.error is None else plotly.error.value
        return found


@scenario
def async_sdk() -> dict[str, Any]:
    """The async SDK over the same calls: a long run, metrics, a signed URL, a refusal."""
    import asyncio

    from e2b_code_interpreter import AsyncSandbox

    async def main() -> dict[str, Any]:
        sbx = await AsyncSandbox.create()
        try:
            slept = await sbx.run_code("import time\ntime.sleep(11)\n'woke'")
            samples = await sbx.get_metrics()
            await sbx.files.write("/home/user/a.txt", "async")
            async with httpx.AsyncClient() as http:
                fetched = await http.get(sbx.download_url("/home/user/a.txt"))
            try:
                await sbx.commands.run("id", user="root")
                root = "no error"
            except Exception as exc:  # noqa: BLE001
                root = type(exc).__name__
            return {"slept": slept.text, "samples": len(samples), "fetched": fetched.text,
                    "root": root}  # fmt: skip
        finally:
            await sbx.kill()

    return asyncio.run(main())


_WAITS_FOR_GO = """
import os, time
print("started", flush=True)
for _ in range(400):  # a bounded wait for the client's go (20 s)
    if os.path.exists("/home/user/go"):
        break
    time.sleep(0.05)
os.path.exists("/home/user/go")
"""


@scenario
def sandboxes_waiting_at_once() -> dict[str, Any]:
    """Four sandboxes' runs that wait, on a server of two CPUs: all four run at once (a
    waiting run holds no slot), so all four start before any is told to go."""
    count = 4
    started = threading.Semaphore(0)
    sandboxes = [Sandbox.create() for _ in range(count)]
    answers: dict[int, Any] = {}

    def run(index: int) -> None:
        def seen(message: Any) -> None:
            if "started" in str(message):
                started.release()

        answers[index] = sandboxes[index].run_code(_WAITS_FOR_GO, on_stdout=seen).text

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    try:
        for thread in threads:
            thread.start()
        all_started = sum(started.acquire(timeout=WAIT_S) for _ in range(count))
        for sbx in sandboxes:
            sbx.files.write("/home/user/go", "go")
        for thread in threads:
            thread.join(timeout=WAIT_S * 2)
        return {"started_before_go": all_started, "answers": [answers.get(i) for i in range(count)]}
    finally:
        for sbx in sandboxes:
            sbx.kill()


_WAITS_FOR_THE_OTHER = """
import os, time
open({mine!r}, "w").close()
for _ in range(400):  # a bounded wait for the other context's mark (20 s)
    if os.path.exists({theirs!r}):
        break
    time.sleep(0.05)
os.path.exists({theirs!r}), os.environ.get("WHO"), os.getcwd()
"""


@scenario
def contexts_at_once() -> dict[str, Any]:
    """Two contexts of one sandbox, each marking that it runs and waiting for the other's
    mark: both see it only if they run side by side (each with its own env_vars and cwd)."""
    with Sandbox.create() as sbx:
        sbx.files.make_dir("/home/user/sub")
        other = sbx.create_code_context(cwd="/home/user/sub")
        answers: dict[str, Any] = {}

        def run(name: str, context: Any, mine: str, theirs: str) -> None:
            code = _WAITS_FOR_THE_OTHER.format(mine=mine, theirs=theirs)
            answers[name] = sbx.run_code(code, context=context, envs={"WHO": name}).text

        threads = [
            threading.Thread(target=run, args=("default", None, "/tmp/a", "/tmp/b")),
            threading.Thread(target=run, args=("other", other, "/tmp/b", "/tmp/a")),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=WAIT_S * 2)
        sbx.run_code("x = 'default'")
        sbx.run_code("x = 'other'", context=other)
        return {
            **answers,
            "default_x": sbx.run_code("x").text,
            "other_x": sbx.run_code("x", context=other).text,
            "env_after": sbx.run_code("import os; 'WHO' in os.environ", context=other).text,
        }


@scenario
def bash_contexts() -> dict[str, Any]:
    """``language="bash"``: a shell whose variables and folder last from run to run, its
    output as stdout, a failing last command E2B's bash kernel error; a context of its own."""
    with Sandbox.create(envs={"GLOBAL": "sandbox"}) as sbx:
        first = sbx.run_code("x=42; cd /tmp; echo start; echo to-stderr >&2", language="bash")
        again = sbx.run_code('echo "$x $PWD $HOME $GLOBAL $(id -u)"', language="bash")
        failed = sbx.run_code("echo before; false", language="bash")
        quoted = sbx.run_code("echo 'a  b' \"it's\" ü\ncat <<'END'\n$x\nEND", language="bash")
        envs = sbx.run_code('echo "$ONE"', language="bash", envs={"ONE": "only-this-run"})
        after = sbx.run_code('echo "[${ONE-unset}] $GLOBAL"', language="bash")
        own = sbx.create_code_context(language="bash", cwd="/home/user")
        separate = sbx.run_code('echo "[${x-unset}] $PWD"', context=own)
        job = "".join(sbx.run_code("sleep 300 & echo $!", context=own).logs.stdout).strip()
        sbx.remove_code_context(own)
        job_gone = sbx.run_code(
            "import os, time\n"
            "for _ in range(400):\n"  # bounded: 2 s
            f"    if not os.path.exists('/proc/{job}'):\n"
            "        break\n"
            "    time.sleep(0.005)\n"
            f"not os.path.exists('/proc/{job}')"
        ).text
        traced = sbx.run_code("set -xv; echo traced; set +xv", language="bash")
        shadowed = sbx.run_code("printf() { :; }; eval() { :; }; echo shadowed", language="bash")
        after_trace = sbx.run_code("unset -f printf eval; echo after", language="bash")
        try:
            sbx.run_code("echo", language="bash", envs={"A B": "x"})
            bad_name: Any = None
        except Exception as exc:  # noqa: BLE001 - what the SDK raises is what is seen
            bad_name = "shell names" in str(exc)
        exited = sbx.run_code("exit 3", language="bash")
        fresh = sbx.run_code('echo "[${x-unset}]"', language="bash")
        python = sbx.run_code("print('still python')")
        try:
            sbx.run_code("1 + 1", language="javascript")
            refused: Any = None
        except Exception as exc:  # noqa: BLE001 - what the SDK raises is what is seen
            refused = "python and bash" in str(exc)
        return {
            "javascript": refused,
            "first": [first.logs.stdout, first.logs.stderr, first.error is None],
            "again": again.logs.stdout,
            "failed": [failed.logs.stdout, failed.error.name, failed.error.value],
            "quoted": quoted.logs.stdout,
            "traced": [traced.error is None, "traced\n" in "".join(traced.logs.stdout)],
            "shadowed": shadowed.logs.stdout,
            "after_trace": after_trace.logs.stdout,
            "bad_name": bad_name,
            "envs": envs.logs.stdout,
            "after": after.logs.stdout,
            "own": [own.language, separate.logs.stdout],
            "job_gone": job_gone,
            "exited": exited.error.value if exited.error else None,
            "fresh": fresh.logs.stdout,
            "python": python.logs.stdout,
            "languages": sorted(c.language for c in sbx.list_code_contexts()),
        }


_SITE = "/home/user/site"
_TOKEN = "e2b-traffic-access-token"
_WS_SERVER = """
import asyncio, sys
from websockets.asyncio.server import serve

async def echo(ws):
    async for message in ws:
        await ws.send(message[::-1] if isinstance(message, str) else message)

async def main():
    async with serve(echo, "127.0.0.1", 8765, subprotocols=["echo.v1"]):
        print("listening", flush=True)
        await asyncio.Future()

asyncio.run(main())
"""


_LISTENS = (
    "import socket, sys, time\n"
    "deadline = time.monotonic() + 20\n"
    "while time.monotonic() < deadline:\n"
    "    try:\n"
    "        socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=1).close()\n"
    "        break\n"
    "    except OSError:\n"
    "        time.sleep(0.02)\n"
)


def _serve(sbx: Any, command: str, port: int) -> Any:
    """A server started in the sandbox, once it listens on ``port`` (judged in there)."""
    handle = sbx.commands.run(command, background=True)
    sbx.files.write("/home/user/listens.py", _LISTENS)
    sbx.commands.run(f"python3 /home/user/listens.py {port}")
    return handle


_GARBAGE_SERVER = """
import socket
server = socket.create_server(("127.0.0.1", 8002))
while True:
    conn, _ = server.accept()
    head = b""
    while b"\\r\\n\\r\\n" not in head:
        chunk = conn.recv(4096)
        if not chunk:
            break
        head += chunk
    open("/home/user/seen_head.txt", "wb").write(head)
    conn.sendall(b"this is no HTTP\\r\\n\\r\\n")
    conn.close()
"""


def _websocket_echo(host: str, token: str | None, text: str) -> dict[str, Any]:
    """A WebSocket to ``host`` through corral, by hand (the SDK's venv has no client): the
    handshake's status and subprotocol, and the echo of one masked text message."""
    import socket
    import struct
    from urllib.parse import urlsplit

    where = urlsplit(BASE)
    sock = socket.create_connection((where.hostname, where.port), timeout=WAIT_S)
    key = base64.b64encode(os.urandom(16)).decode()
    head = (f"GET /chat HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: echo.v1\r\n")  # fmt: skip
    if token:
        head += f"{_TOKEN}: {token}\r\n"
    sock.sendall((head + "\r\n").encode())
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = sock.recv(4096)
        if not chunk:
            break
        reply += chunk
    status_line, _, rest = reply.partition(b"\r\n")
    status = int(status_line.split()[1])
    lines = rest.split(b"\r\n\r\n")[0].split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in lines)}
    if status != 101:
        sock.close()
        return {"status": status}
    payload, mask = text.encode(), os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    sock.sendall(struct.pack("!BB", 0x81, 0x80 | len(payload)) + mask + masked)
    frame = reply.split(b"\r\n\r\n", 1)[1]
    while len(frame) < 2 or len(frame) < 2 + (frame[1] & 0x7F):
        frame += sock.recv(4096)
    echoed = frame[2 : 2 + (frame[1] & 0x7F)].decode()
    sock.sendall(struct.pack("!BBH", 0x88, 0x82, 0) + b"\0\0")  # close 1000, masked by zeros
    sock.close()
    return {"status": status, "protocol": headers.get(b"sec-websocket-protocol", b"").decode(),
            "echo": echoed}  # fmt: skip


@scenario
def ports() -> dict[str, Any]:
    """A server the code starts in the sandbox, reached through get_host: by Host and by
    E2B's headers, with the traffic token; refused without it or with another's; 502 where
    nothing listens; a WebSocket echo; a public sandbox without a token."""
    with (
        Sandbox.create() as sbx,
        Sandbox.create() as other,
        Sandbox.create(network={"allow_public_traffic": True}) as public,
    ):
        sbx.files.write(f"{_SITE}/hello.txt", "hello from the sandbox")
        web = _serve(sbx, f"python3 -m http.server 8000 --directory {_SITE}", 8000)
        # Before any request came in: the sandbox's loopback is up from its start, as on E2B.
        inside = sbx.run_code(
            "import urllib.request\n"
            "urllib.request.urlopen('http://127.0.0.1:8000/hello.txt').read().decode()"
        )
        token = getattr(sbx, "traffic_access_token", None)
        host = sbx.get_host(8000)
        with_token = {"Host": host, _TOKEN: token or ""}
        by_host = httpx.get(f"{BASE}/hello.txt", headers=with_token)
        by_headers = httpx.get(
            f"{BASE}/hello.txt",
            headers={"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8000",
                     _TOKEN: token or ""},
        )  # fmt: skip
        no_token = httpx.get(f"{BASE}/hello.txt", headers={"Host": host})
        other_token = getattr(other, "traffic_access_token", None) or ""
        wrong_token = httpx.get(f"{BASE}/hello.txt", headers={"Host": host, _TOKEN: other_token})
        closed = httpx.get(f"{BASE}/", headers={"Host": sbx.get_host(8001), _TOKEN: token or ""})
        missing = httpx.get(f"{BASE}/", headers={"Host": f"8000-{'0' * 32}.x", _TOKEN: "x"})
        sbx.commands.run(f"cat > /home/user/ws.py <<'EOF'\n{_WS_SERVER}\nEOF")
        ws_server = _serve(sbx, "python3 /home/user/ws.py", 8765)
        echo = _websocket_echo(sbx.get_host(8765), token, "hello websocket")
        ws_no_token = _websocket_echo(sbx.get_host(8765), None, "x")
        sbx.files.write("/home/user/garbage.py", _GARBAGE_SERVER)
        _serve(sbx, "python3 /home/user/garbage.py", 8002)
        garbage = httpx.get(
            f"{BASE}/x",
            headers={"Host": sbx.get_host(8002), _TOKEN: token or "",
                     "X-Access-Token": sbx._envd_access_token or ""},
        )  # fmt: skip
        seen_head = sbx.files.read("/home/user/seen_head.txt").lower()
        public.files.write(f"{_SITE}/index.html", "public page")
        _serve(public, f"python3 -m http.server 9000 --directory {_SITE}", 9000)
        open_page = httpx.get(f"{BASE}/index.html", headers={"Host": public.get_host(9000)})
        web.kill()
        ws_server.kill()
        return {
            "host": host,
            "id": sbx.sandbox_id,
            "token": bool(token),
            "public_token": getattr(public, "traffic_access_token", None),
            "by_host": [by_host.status_code, by_host.text],
            "by_headers": [by_headers.status_code, by_headers.text],
            "inside": inside.text,
            "no_token": no_token.status_code,
            "wrong_token": wrong_token.status_code,
            "closed": [closed.status_code, closed.json()],
            "missing": missing.status_code,
            "echo": echo,
            "ws_no_token": ws_no_token,
            "public": [open_page.status_code, open_page.text],
            "garbage": [garbage.status_code, garbage.json()["message"]],
            "head_has_host": f"host: {host.replace('8000-', '8002-')}" in seen_head,
            "head_has_secret": _TOKEN in seen_head or "x-access-token" in seen_head,
        }


class _Screen:
    """What a pty has shown, read by a thread of its own; ``wait_for`` a text to appear."""

    def __init__(self, handle: Any) -> None:
        self.shown = b""
        self._changed = threading.Condition()
        self.ended: str | None = None
        self._thread = threading.Thread(target=self._read, args=(handle,), daemon=True)
        self._thread.start()

    def _read(self, handle: Any) -> None:
        try:
            for _stdout, _stderr, pty in handle:
                if pty is not None:
                    with self._changed:
                        self.shown += pty
                        self._changed.notify_all()
            self.ended = "ended"
        except Exception as exc:  # noqa: BLE001 - the scenario reports it
            self.ended = type(exc).__name__
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, text: bytes) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: text in self.shown, timeout=WAIT_S)

    def join(self) -> None:
        self._thread.join(WAIT_S)


@scenario
def pty() -> dict[str, Any]:
    """bash on a real terminal: a command typed and its output, a resize bash sees, a kill."""
    from e2b import PtySize

    with Sandbox.create() as sbx:
        handle = sbx.pty.create(PtySize(rows=24, cols=80))
        screen = _Screen(handle)
        sbx.pty.send_stdin(handle.pid, b"echo tty=$(tty) sum=$((6 * 7))\n")
        answered = screen.wait_for(b"sum=42")
        # The terminals the sandbox sees: its own devpts instance, holding this one pty alone.
        devpts = sbx.commands.run("stat -f -c %T /dev/pts; ls /dev/pts").stdout.split()
        sbx.pty.send_stdin(handle.pid, b"stty size; echo sized\n")
        first_size = screen.wait_for(b"24 80")
        sbx.pty.resize(handle.pid, PtySize(rows=30, cols=100))
        sbx.pty.send_stdin(handle.pid, b"stty size\n")
        resized = screen.wait_for(b"30 100")
        killed = sbx.pty.kill(handle.pid)
        screen.join()
        listed = [p.pid for p in sbx.commands.list()]
        text = screen.shown.decode(errors="replace")
        return {
            "answered": answered,
            "tty": "tty=/dev/pts/" in text,
            "devpts": devpts,
            "first_size": first_size,
            "resized": resized,
            "killed": killed,
            "ended": screen.ended,
            "still_listed": handle.pid in listed,
        }


def _events_until(handle: Any, name: str, kind: str | None = None) -> list[list[str]]:
    """``get_new_events`` until one names ``name`` (and is of ``kind``, when given; each call
    a round trip; bounded): the events of one write may come in separate answers."""
    seen: list[list[str]] = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not any(n == name and kind in (None, k) for n, k in seen):
        seen += [[e.name, e.type.value] for e in handle.get_new_events()]
    return seen


@scenario
def watch_dir() -> dict[str, Any]:
    """A watcher sees files made by code: one folder, then recursively; a missing folder is
    refused; the async SDK's stream sees one too."""
    import asyncio

    from e2b_code_interpreter import AsyncSandbox

    found: dict[str, Any] = {}
    with Sandbox.create() as sbx:
        sbx.files.make_dir("/home/user/watched/deep")
        handle = sbx.files.watch_dir("/home/user/watched")
        sbx.run_code("open('/home/user/watched/made.txt', 'w').write('by code')")
        found["flat"] = _events_until(handle, "made.txt", "write")
        handle.stop()
        deep = sbx.files.watch_dir("/home/user/watched", recursive=True)
        sbx.run_code("import os\nos.makedirs('/home/user/watched/deep/new')\n"
                     "open('/home/user/watched/deep/new/x.txt', 'w').write('x')")  # fmt: skip
        found["recursive"] = _events_until(deep, "deep/new/x.txt")
        deep.stop()
        found["missing"] = _raised(lambda: sbx.files.watch_dir("/home/user/nope"))

    async def main() -> list[list[str]]:
        sbx = await AsyncSandbox.create()
        try:
            await sbx.files.make_dir("/home/user/w")
            seen: list[list[str]] = []
            arrived = asyncio.Event()

            def on_event(event: Any) -> None:
                seen.append([event.name, event.type.value])
                if [event.name, event.type.value] == ["async.txt", "write"]:
                    arrived.set()

            handle = await sbx.files.watch_dir("/home/user/w", on_event=on_event)
            await sbx.commands.run("echo hi > /home/user/w/async.txt")
            async with asyncio.timeout(WAIT_S):
                await arrived.wait()
            await handle.stop()
            return seen
        finally:
            await sbx.kill()

    found["async"] = asyncio.run(main())
    return found


finish()

"""E2B's Template SDK against a live ``corral serve``: run by a venv holding one SDK version.

Usage: ``python template_scenarios.py BASE_URL KEY OTHER_KEY HOST_MARK``. Prints one JSON
object: for each scenario, what the SDK saw (or the exception it raised), for the tests to
judge. Imports nothing of corral: it is the unmodified SDK speaking to the server.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BASE, KEY, OTHER_KEY, HOST_MARK = sys.argv[1:5]
os.environ.update(E2B_API_URL=BASE, E2B_SANDBOX_URL=BASE, E2B_API_KEY=KEY)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: its tests package

from e2b_code_interpreter import Sandbox  # noqa: E402

from e2b import Template  # noqa: E402
from tests.e2b.scenariokit import finish, scenario  # noqa: E402

CONTEXT = Path(tempfile.mkdtemp())
(CONTEXT / "data.txt").write_text("copied by the SDK\n")
(CONTEXT / "conf").mkdir()
(CONTEXT / "conf" / "settings.ini").write_text("[x]\ny = 1\n")
POLL_S = 0.2
WAIT_S = 120  # bound of a background build's polling
PAUSE = threading.Event()  # never set: its wait is the poll's interval


@scenario
def build_and_use() -> dict[str, Any]:
    logs: list[str] = []
    template = (
        Template(file_context_path=str(CONTEXT))
        .from_template("code-interpreter-v1")
        .pip_install(["corral_test_pkg"])
        .copy("data.txt", "/home/user/data.txt")
        .copy("conf", "/home/user/conf")
        .set_envs({"TPL_GREETING": "hello from the template"})
        # A build step that tries the host: it must find itself uid 1000 in a sandbox where
        # the host's path does not exist, and nothing of it may appear on the host.
        .run_cmd(
            # the guard: uid 1000, the sandbox's, before it tries anything
            f"id -u > /home/user/uid.txt; test $(id -u) = 1000 "
            f"&& (touch {HOST_MARK} 2>/dev/null; echo tried)"
        )
        .set_workdir("/home/user/work")
    )
    info = Template.build(
        template, alias="sdk-stack", on_build_logs=lambda e: logs.append(e.message)
    )
    exists = Template.exists("sdk-stack")
    with Sandbox.create(template="sdk-stack") as sbx:
        seen = sbx.run_code(
            "import corral_test_pkg, os\n"
            "(corral_test_pkg.VALUE, os.environ.get('TPL_GREETING'), os.getcwd(),\n"
            " open('/home/user/data.txt').read(), open('/home/user/conf/settings.ini').read(),\n"
            " open('/home/user/uid.txt').read().strip())"
        )
        command = sbx.commands.run(
            "python -c 'import corral_test_pkg; print(corral_test_pkg.VALUE)'"
        )
        written = sbx.run_code("open('/home/user/data.txt', 'a').write('more')")
    return {
        "template_id": info.template_id,
        "exists": exists,
        "logs": logs,
        "value": seen.text,
        "error": None if seen.error is None else seen.error.name,
        "command": command.stdout.strip(),
        "writable": written.error is None,
    }


@scenario
def default_sandbox_lacks_the_package() -> str | None:
    with Sandbox.create() as sbx:
        run = sbx.run_code("import corral_test_pkg")
    return None if run.error is None else run.error.name


@scenario
def in_background() -> dict[str, Any]:
    # Two builds at once: the server runs one at a time, the other waits its turn.
    first = Template().from_base_image().run_cmd("echo background > /home/user/bg.txt")
    second = Template().from_base_image().run_cmd("echo second > /home/user/bg.txt")
    infos = [
        Template.build_in_background(first, alias="sdk-bg"),
        Template.build_in_background(second, alias="sdk-bg2"),
    ]
    seen: list[list[str]] = [[], []]
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        states = [Template.get_build_status(info).status.value for info in infos]
        for statuses, state in zip(seen, states, strict=True):
            statuses.append(state)
        if all(state in ("ready", "error") for state in states):
            break
        PAUSE.wait(POLL_S)  # a bounded poll of the builds' state, as the SDK's own wait does
    with Sandbox.create(template="sdk-bg") as sbx:
        content = sbx.files.read("/home/user/bg.txt")
    with Sandbox.create(template="sdk-bg2") as sbx:
        second_content = sbx.files.read("/home/user/bg.txt")
    return {
        "last": [s[-1] for s in seen],
        "seen": [sorted(set(s)) for s in seen],
        "content": content,
        "second": second_content,
    }


@scenario
def failing_step() -> None:
    Template.build(
        Template().from_base_image().run_cmd("echo about to fail; exit 7"), alias="sdk-fail"
    )


@scenario
def from_image_refused() -> None:
    Template.build(Template().from_image("python:3.12"), alias="sdk-image")


@scenario
def apt_refused() -> None:
    Template.build(Template().from_base_image().apt_install(["curl"]), alias="sdk-apt")


@scenario
def start_cmd_refused() -> None:
    Template.build(
        Template().from_base_image().set_start_cmd("python -m http.server", "sleep 1"),
        alias="sdk-start",
    )


@scenario
def unknown() -> dict[str, Any]:
    exists = Template.exists("no-such-template")
    try:
        Sandbox.create(template="no-such-template")
    except Exception as exc:  # noqa: BLE001 - the test judges it
        return {"exists": exists, "raised": type(exc).__name__, "message": str(exc)[:300]}
    return {"exists": exists, "raised": None}


@scenario
def other_key() -> dict[str, Any]:
    exists = Template.exists("sdk-stack", api_key=OTHER_KEY)
    try:
        Sandbox.create(template="sdk-stack", api_key=OTHER_KEY)
    except Exception as exc:  # noqa: BLE001 - the test judges it
        return {"exists": exists, "raised": type(exc).__name__, "message": str(exc)[:300]}
    return {"exists": exists, "raised": None}


finish()

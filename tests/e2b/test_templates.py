"""E2B's Template SDK (e2b 2.63.0), unmodified, building and using templates on a live server:
``template_scenarios.py`` runs once, the tests judge what it saw."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2b.conftest import CORRAL, KEY, OTHER_KEY, Server, sdk_python

pytestmark = [pytest.mark.isolation, pytest.mark.timeout(600)]

_SCENARIOS = Path(__file__).with_name("template_scenarios.py")
_SDK = ("2.63.0", "2.11.5")
_TIMEOUT = 400  # seconds for every scenario (four builds on a shared machine)


@pytest.fixture(scope="module")
def host_mark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host path a build step tries to create (it must not exist afterwards)."""
    return tmp_path_factory.mktemp("template-host") / "written-by-a-build"


@pytest.fixture(scope="module")
def seen(corral_server: Server, host_mark: Path) -> dict[str, Any]:
    python = sdk_python(*_SDK)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "CORRAL_"))}
    done = subprocess.run(
        [str(python), str(_SCENARIOS), corral_server.url, KEY, OTHER_KEY, str(host_mark)],
        capture_output=True, text=True, timeout=_TIMEOUT, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def ok(seen: dict[str, Any], name: str) -> Any:
    outcome = seen[name]
    assert "ok" in outcome, f"{name} raised {outcome.get('raised')}: {outcome.get('traceback')}"
    return outcome["ok"]


def raised(seen: dict[str, Any], name: str) -> str:
    outcome = seen[name]
    assert "raised" in outcome, f"{name} did not raise: {outcome}"
    assert outcome["raised"] == "BuildException"
    message: str = outcome["message"]
    return message


def test_a_built_template_has_its_packages_files_env_and_workdir(seen: dict[str, Any]) -> None:
    used = ok(seen, "build_and_use")
    assert used["template_id"] == "sdk-stack"
    assert used["exists"] is True
    assert used["error"] is None
    value = used["value"]
    assert "42" in value  # the pip-installed package imports
    assert "hello from the template" in value  # set_envs
    assert "/home/user/work" in value  # set_workdir is where code starts
    assert "copied by the SDK" in value
    assert "y = 1" in value
    assert used["command"] == "42"  # commands see the layer's packages too
    assert used["writable"] is True  # the copies in the home are the sandbox's own
    logs = "\n".join(used["logs"])
    assert "Successfully installed corral_test_pkg" in logs  # the build's log streams
    assert "template sdk-stack is ready" in logs


def test_a_build_step_runs_as_the_sandbox_user_and_cannot_write_the_host(
    seen: dict[str, Any], host_mark: Path
) -> None:
    used = ok(seen, "build_and_use")
    assert used["value"].endswith("'1000')")  # uid 1000 inside: the step's own id -u
    assert not host_mark.exists()
    assert not host_mark.parent.joinpath("uid.txt").exists()


def test_a_default_sandbox_does_not_see_a_templates_package(seen: dict[str, Any]) -> None:
    assert ok(seen, "default_sandbox_lacks_the_package") == "ModuleNotFoundError"


def test_builds_in_background_queue_and_report_their_status(seen: dict[str, Any]) -> None:
    bg = ok(seen, "in_background")
    assert bg["last"] == ["ready", "ready"]
    assert bg["content"] == "background\n"
    assert bg["second"] == "second\n"
    assert "waiting" in bg["seen"][1]  # the second waited for the first: one build at a time


def test_a_failing_step_fails_the_build_with_its_log(seen: dict[str, Any]) -> None:
    assert "step 1 failed: the step exited with status 7" in raised(seen, "failing_step")


def test_images_apt_and_start_commands_are_refused_naming_the_step(seen: dict[str, Any]) -> None:
    image = raised(seen, "from_image_refused")
    assert image.startswith("400: step 0 (from_image 'python:3.12')")
    apt = raised(seen, "apt_refused")
    assert "step 1 (apt_install" in apt
    assert "cannot install OS packages" in apt
    assert "set_start_cmd" in raised(seen, "start_cmd_refused")


def test_unknown_and_other_keys_templates(seen: dict[str, Any]) -> None:
    unknown = ok(seen, "unknown")
    assert unknown["exists"] is False
    assert unknown["message"].startswith("404: template 'no-such-template' not found")
    other = ok(seen, "other_key")
    assert other["exists"] is True  # E2B's SDK reads another team's alias (403) as taken
    assert other["message"].startswith("404: template 'sdk-stack' not found")


def test_templates_are_kept_in_the_data_folder(seen: dict[str, Any], corral_server: Server) -> None:
    ok(seen, "build_and_use")
    root = corral_server.data_dir / "templates"
    assert oct(root.stat().st_mode & 0o777) == "0o700"
    record = json.loads((root / "sdk-stack" / "template.json").read_text())
    assert record["version"] == 1
    assert record["owner"]
    layer = root / "sdk-stack" / record["layer"]
    assert (layer / "site-packages" / "corral_test_pkg" / "__init__.py").is_file()
    assert (layer / "files" / "data.txt").read_text() == "copied by the SDK\n"
    assert not (root / "sdk-fail").exists()  # a failed build leaves no template
    assert list((root / ".staging").iterdir()) == []  # nor a half-made layer


def test_a_running_server_uses_a_template_the_cli_built_meanwhile(
    seen: dict[str, Any], corral_server: Server
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "MISTRAL_"))}
    env.update(CORRAL_DATA_DIR=str(corral_server.data_dir), CORRAL_PACKAGES_INDEX_URL="")
    built = subprocess.run(
        [CORRAL, "template", "build", "cli-live", "--base", "base", "--run", "echo live > l.txt"],
        env=env, capture_output=True, text=True, timeout=_TIMEOUT, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    answer = httpx.post(
        f"{corral_server.url}/v1/execute",
        json={"code": "open('l.txt').read()", "template": "cli-live"},
        headers={"Api-Key": KEY},
        timeout=_TIMEOUT,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"] == {"text/plain": "'live\\n'"}  # an operator's: every key's

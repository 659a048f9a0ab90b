"""``corral tools list`` and ``corral tools call`` as a user types them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CORRAL = str(Path(sys.executable).with_name("corral"))

pytestmark = pytest.mark.isolation


def corral(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "MISTRAL_"))}
    return subprocess.run(
        [CORRAL, *args], env={**clean, **env}, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip


def test_list_marks_the_mistral_tools_unavailable_without_a_key() -> None:
    done = corral("tools", "list")
    rows = dict(line.split("\t", 1) for line in done.stdout.splitlines())
    assert done.returncode == 0
    assert next(iter(rows)) == "code_interpreter"
    assert not rows["code_interpreter"].startswith("(unavailable")
    for name in ("mistral_code_interpreter", "web_search"):
        assert rows[name].startswith("(unavailable: set MISTRAL_API_KEY)"), rows[name]
    assert not any(name.startswith("mistral_connector") for name in rows)
    assert done.stderr == ""  # no warning about connectors nobody asked for


def test_call_runs_code_and_prints_the_tool_result() -> None:
    arguments = json.dumps({"summary": "the answer", "code": "print(6 * 7)"})
    done = corral("tools", "call", "code_interpreter", arguments)
    result = json.loads(done.stdout)
    assert done.returncode == 0
    assert result["is_error"] is False
    assert result["structured"]["stdout"] == "42\n"
    assert "42" in result["content"][0]["text"]


def test_call_reports_errors_as_results() -> None:
    unknown = corral("tools", "call", "no_such_tool", "{}")
    assert unknown.returncode == 1
    assert json.loads(unknown.stdout)["error"]["kind"] == "unknown_tool"
    extra_field = corral(
        "tools", "call", "code_interpreter", '{"summary": "s", "code": "1", "packages": ["x"]}'
    )
    assert extra_field.returncode == 1
    assert json.loads(extra_field.stdout)["is_error"] is True
    not_json = corral("tools", "call", "code_interpreter", "{not json")
    assert not_json.returncode == 2


def test_web_search_without_a_key_is_a_config_error() -> None:
    done = corral("tools", "call", "web_search", '{"query": "corral"}')
    result = json.loads(done.stdout)
    assert done.returncode == 1
    assert result["error"]["kind"] == "config"
    assert "MISTRAL_API_KEY" in result["error"]["message"]

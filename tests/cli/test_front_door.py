"""What a new user meets first: --version, help texts, one-line start-up errors (issue 10 #6)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

CORRAL = str(Path(sys.executable).with_name("corral"))


def corral(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "MISTRAL_"))}
    return subprocess.run(
        [CORRAL, *args], env={**clean, **env}, capture_output=True, text=True, timeout=120,
        check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_version() -> None:
    done = corral("--version")
    assert (done.returncode, done.stdout) == (0, f"corral {metadata.version('corral')}\n")


def test_serve_help_states_the_real_defaults() -> None:
    done = corral("serve", "--help")
    text = " ".join(done.stdout.split())  # argparse wraps lines
    assert done.returncode == 0
    assert "default 8000; 8080 in container mode" in text
    assert "default 127.0.0.1; 0.0.0.0 in container mode" in text
    assert "default 8080)" not in text
    assert "--header-timeout SECONDS" in text


def test_a_bad_header_timeout_flag_is_one_line_and_exit_2() -> None:
    done = corral("serve", "--header-timeout", "0")
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr
        == "corral serve: configuration error: header_timeout must be positive, not 0.0\n"
    )


@pytest.mark.parametrize(
    ("toml", "where"),
    [
        ("bogus = 1\n", "'bogus' at the top level"),
        ("[engine]\nbogus = 1\n", "'bogus' in [engine]"),
        ("[code_interpreter]\nmax_cals = 1\n", "'max_cals' in [code_interpreter]"),
    ],
)
def test_unknown_keys_are_one_line_and_exit_2(tmp_path: Path, toml: str, where: str) -> None:
    path = tmp_path / "corral.toml"
    path.write_text(toml)
    for command in (["serve"], ["run", "-c", "1"], ["tools", "list"], ["mcp"]):
        done = corral(*command, "--config", str(path))
        assert done.returncode == 2, (command, done.stderr)
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert where in done.stderr


@pytest.mark.isolation
@pytest.mark.parametrize("command", [["serve", "--port"], ["mcp", "--http"]])
def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path, command: list[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = corral(*command, str(port), XDG_DATA_HOME=str(tmp_path))
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    expected = f"corral {command[0]}: cannot listen: 127.0.0.1:{port}: Address already in use"
    assert lines[-1] == expected
    assert "Traceback" not in done.stderr
    assert "ExceptionGroup" not in done.stderr


def test_the_chat_help_names_the_model_chat_uses() -> None:
    from corral.mistral import DEFAULT_CHAT_MODEL

    done = corral("chat", "--help")
    assert f"default {DEFAULT_CHAT_MODEL}" in " ".join(done.stdout.split())

"""``corral chat`` from a terminal, against the fake Mistral API on loopback: the model calls
corral's own code_interpreter, which runs in a real sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from .fake_mistral import API_KEY, FakeMistral, Reply, completion, tool_call

CORRAL = str(Path(sys.executable).with_name("corral"))

pytestmark = [pytest.mark.anyio, pytest.mark.network, pytest.mark.isolation]


async def test_chat_runs_local_code_for_the_model(fake: FakeMistral, loopback: str) -> None:
    arguments = json.dumps({"summary": "multiply", "code": "print(6 * 7)"})
    fake.chat = [
        Reply(200, completion(tool_calls=[tool_call("code_interpreter", arguments)])),
        Reply(200, completion("The answer is 42.")),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "MISTRAL_"))}
    env.update(MISTRAL_API_KEY=API_KEY, MISTRAL_BASE_URL=loopback, MISTRAL_CONNECTOR_TOOLS="0")

    def chat() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CORRAL, "chat"], input="What is 6 times 7?\n", env=env, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip

    done = await anyio.to_thread.run_sync(chat)
    assert done.returncode == 0, done.stderr
    assert "The answer is 42." in done.stdout
    first, second = fake.bodies("/v1/chat/completions")
    declared = {tool["function"]["name"] for tool in first["tools"]}
    assert {"code_interpreter", "web_search"} <= declared
    (tool_message,) = [m for m in second["messages"] if m["role"] == "tool"]
    assert "42" in json.dumps(tool_message["content"])

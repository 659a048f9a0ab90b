"""SandboxFusion's /run_code and corral's /run_code_batch against a live server.

The official ``sandbox-fusion`` client and verl's exact request body (``requests``, as verl
sends it) talk to uvicorn on loopback, over the sandbox's in-process twin where the answer is
the front end's (shapes, statuses, exit codes, auth), over the shared real engine where it is
the sandbox's (stdin at fd 0, memory, /work, a batch's cases).
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
import requests
import sandbox_fusion
import uvicorn
from fastapi import FastAPI

from corral._config import Config
from corral.engine import Engine
from corral.http import create_app
from tests.http.httpkit import ALICE, BOB, KEYS
from tests.http.twinkit import Script, runs_until_stopped

pytestmark = [pytest.mark.anyio, pytest.mark.network]

VERL_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
# The standard-library names verl's function-call harness star-imports before the solution.
HARNESS_MODULES = [
    "string",
    "re",
    "datetime",
    "collections",
    "heapq",
    "bisect",
    "copy",
    "math",
    "random",
    "statistics",
    "itertools",
    "functools",
    "operator",
    "io",
    "sys",
    "json",
    "builtins",
    "typing",
]


def verl_body(code: str, stdin: str | None, timeout: int = 10) -> dict[str, Any]:
    """Exactly the body verl's reward code posts (docs/sandboxfusion.md §6)."""
    return {
        "compile_timeout": timeout,
        "run_timeout": timeout,
        "code": code,
        "stdin": stdin,
        "memory_limit_MB": 1024,
        "language": "python",
        "files": {},
        "fetch_files": [],
    }


def function_call_harness(solution: str, fn_name: str) -> str:
    """A harness shaped like verl's for ``fn_name`` problems: star imports, the solution, then
    JSON arguments from stdin (one per line) and the JSON-printed result."""
    stars = "\n".join(f"from {m} import *" for m in HARNESS_MODULES)
    plain = "\n".join(f"import {m}" for m in HARNESS_MODULES if m not in ("builtins", "typing"))
    return f"""{stars}
{plain}
import traceback

{solution}

def _call():
    raw = sys.stdin.read()
    try:
        args = [json.loads(line) for line in raw.split('\\n')] if raw.strip() else []
    except ValueError as exc:
        sys.stderr.write(f'bad JSON arguments: {{exc}}\\n')
        return None, True
    try:
        target = globals().get({fn_name!r}) or getattr(globals()['Solution'](), {fn_name!r})
        return target(*args), False
    except Exception:
        sys.stderr.write(traceback.format_exc())
        return None, True

if __name__ == '__main__':
    value, failed = _call()
    if not failed:
        if isinstance(value, (dict, list, tuple, bool)) or value is None:
            print(json.dumps(value))
        else:
            print(str(value))
"""


@contextlib.asynccontextmanager
async def live(app: FastAPI) -> AsyncIterator[str]:
    """``app`` under uvicorn on 127.0.0.1; connections queue on the bound socket at once."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    server = uvicorn.Server(
        uvicorn.Config(app, lifespan="off", log_level="warning", server_header=False)
    )
    with listener:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [listener])
            try:
                yield f"http://127.0.0.1:{listener.getsockname()[1]}"
            finally:
                server.should_exit = True


SPINS = "import sys, time\nprint('started', flush=True)\nwhile True: pass"


@pytest.fixture(scope="module")
def stand_ins() -> dict[str, Script]:
    return {SPINS: runs_until_stopped("started\n")}


@contextlib.asynccontextmanager
async def _open(engine: Engine, data_dir: Any) -> AsyncIterator[str]:
    config = Config(data_dir=data_dir, api_keys=KEYS, timeout=20, open_run_code=True)
    async with live(create_app(engine, config)) as url:
        yield url


@pytest.fixture(scope="module")
async def open_url(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    async with _open(engine, tmp_path_factory.mktemp("open")) as url:
        yield url


@pytest.fixture(scope="module")
async def real_open_url(
    real_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    async with _open(real_engine, tmp_path_factory.mktemp("real-open")) as url:
        yield url


@pytest.fixture(scope="module")
async def keyed_url(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    config = Config(data_dir=tmp_path_factory.mktemp("keyed"), api_keys=KEYS, timeout=20)
    async with live(create_app(engine, config)) as url:
        yield url


async def official(url: str, **fields: Any) -> sandbox_fusion.RunCodeResponse:
    request = sandbox_fusion.RunCodeRequest(language="python", **fields)
    response: sandbox_fusion.RunCodeResponse = await anyio.to_thread.run_sync(
        lambda: sandbox_fusion.run_code(request, endpoint=url, max_attempts=1)
    )
    return response


async def verl_post(url: str, body: dict[str, Any], **headers: str) -> requests.Response:
    timeout = body["compile_timeout"] + body["run_timeout"] + 10
    response: requests.Response = await anyio.to_thread.run_sync(
        lambda: requests.post(
            f"{url}/run_code",
            headers={**VERL_HEADERS, **headers},
            data=json.dumps(body),
            timeout=timeout,
        )
    )
    return response


async def test_official_client_stdin_and_stdout(open_url: str) -> None:
    code = "a, b = map(int, input().split())\nprint(a + b)\nimport sys; print('e', file=sys.stderr)"
    response = await official(open_url, code=code, stdin="2 40\n")
    assert response.status == sandbox_fusion.RunStatus.Success
    assert response.message == ""
    assert response.compile_result is None
    run = response.run_result
    assert run is not None
    assert run.status == sandbox_fusion.CommandRunStatus.Finished
    assert (run.return_code, run.stdout, run.stderr) == (0, "42\n", "e\n")
    assert run.execution_time is not None
    assert run.execution_time > 0
    summary = sandbox_fusion.summary_run_code_result(response, sandbox_fusion.SummaryMapping())
    assert summary == "Success"


async def test_every_key_comes_back_with_sandboxfusions_types(open_url: str) -> None:
    response = await verl_post(open_url, verl_body("print('secret flag')", None))
    assert response.status_code == 200
    body = response.json()
    assert list(body) == [
        "status",
        "message",
        "compile_result",
        "run_result",
        "executor_pod_name",
        "files",
    ]
    assert body["status"] == "Success"
    assert body["files"] == {}
    assert body["executor_pod_name"] is None
    run = body["run_result"]
    assert list(run) == ["status", "execution_time", "return_code", "stdout", "stderr"]
    assert (run["stdout"], run["stderr"], run["return_code"]) == ("secret flag\n", "", 0)


async def test_no_stdin_is_eof_not_a_hang(real_open_url: str) -> None:
    open_url = real_open_url
    body = (
        await verl_post(open_url, verl_body("import sys\nprint(repr(sys.stdin.read()))", None))
    ).json()
    assert body["run_result"]["stdout"] == "''\n"
    failed = (await verl_post(open_url, verl_body("input()", None))).json()
    assert failed["status"] == "Failed"
    assert "EOFError" in failed["run_result"]["stderr"]


async def test_large_stdin_reaches_fd_0(real_open_url: str) -> None:
    open_url = real_open_url
    stdin = "".join(f"{i}\n" for i in range(50_000))  # past a pipe's capacity
    code = "import sys\nnums = [int(x) for x in open(0).read().split()]\nprint(sum(nums))"
    body = (await verl_post(open_url, verl_body(code, stdin))).json()
    assert body["run_result"]["stdout"] == f"{sum(range(50_000))}\n"


async def test_exit_codes_and_errors(open_url: str) -> None:
    exited = await official(open_url, code="import sys\nprint('x')\nsys.exit(3)")
    assert exited.status == sandbox_fusion.RunStatus.Failed
    assert exited.run_result is not None
    assert (exited.run_result.status, exited.run_result.return_code) == ("Finished", 3)
    assert exited.run_result.stdout == "x\n"
    clean = await official(open_url, code="import sys\nsys.exit(0)")
    assert clean.status == sandbox_fusion.RunStatus.Success
    raised = await official(open_url, code="1 / 0")
    assert raised.run_result is not None
    assert raised.run_result.return_code == 1
    assert "ZeroDivisionError" in (raised.run_result.stderr or "")
    # Text exits 1, as Python does; int() would read this Arabic-Indic digit as 3.
    spelt = await official(open_url, code="import sys\nsys.exit('\\u0663')")
    assert spelt.run_result is not None
    assert spelt.run_result.return_code == 1


async def test_a_syntax_error_is_a_finished_run_with_code_1(open_url: str) -> None:
    response = await official(open_url, code="def f(:\n  pass")
    assert response.status == sandbox_fusion.RunStatus.Failed
    assert response.compile_result is None
    assert response.run_result is not None
    assert (response.run_result.status, response.run_result.return_code) == ("Finished", 1)
    assert "SyntaxError" in (response.run_result.stderr or "")


async def test_timeout_is_time_limit_exceeded_with_no_return_code(open_url: str) -> None:
    response = await official(open_url, code=SPINS, run_timeout=1)
    assert response.status == sandbox_fusion.RunStatus.Failed
    run = response.run_result
    assert run is not None
    assert run.status == sandbox_fusion.CommandRunStatus.TimeLimitExceeded
    assert run.return_code is None
    assert run.stdout == "started\n"
    assert run.execution_time is not None
    assert run.execution_time >= 1
    summary = sandbox_fusion.summary_run_code_result(
        response, sandbox_fusion.SummaryMapping(RunTimeout="timeout")
    )
    assert summary == "timeout"


async def test_memory_limit(real_open_url: str) -> None:
    open_url = real_open_url
    hog = "blocks = [bytearray(64 * 1024 * 1024) for _ in range(64)]\nprint('all held')"
    tight = (await verl_post(open_url, {**verl_body(hog, None), "memory_limit_MB": 256})).json()
    assert tight["status"] == "Failed"
    assert tight["run_result"]["return_code"] == 1
    assert "MemoryError" in tight["run_result"]["stderr"]
    ordinary = "import numpy, pandas\nprint(pandas.DataFrame({'a': numpy.arange(3)}).a.sum())"
    verl_default = (await verl_post(open_url, verl_body(ordinary, None))).json()
    assert verl_default["status"] == "Success", verl_default
    assert verl_default["run_result"]["stdout"] == "3\n"


async def test_files_and_fetch_files(real_open_url: str) -> None:
    open_url = real_open_url
    code = (
        "print(open('data/in.txt').read())\n"
        "open('out.bin', 'wb').write(bytes(range(256)))\n"
        "open('/work/second.txt', 'w').write('two')"
    )
    files = {
        "data/in.txt": base64.b64encode(b"secret flag").decode(),
        "skipped.txt": None,
        "IGNORE_THIS_FILE.txt": base64.b64encode(b"no").decode(),
    }
    response = await official(
        open_url,
        code=code,
        files=files,
        fetch_files=["out.bin", "/work/second.txt", "missing.txt"],
    )
    assert response.status == sandbox_fusion.RunStatus.Success
    assert response.run_result is not None
    assert response.run_result.stdout == "secret flag\n"
    assert set(response.files) == {"out.bin", "/work/second.txt"}
    assert base64.b64decode(response.files["out.bin"]) == bytes(range(256))
    assert base64.b64decode(response.files["/work/second.txt"]) == b"two"


async def test_bad_files_are_422_naming_the_file(open_url: str) -> None:
    body = {**verl_body("print(1)", None), "files": {"../escape": "aGk="}}
    response = await verl_post(open_url, body)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "files", "../escape"]
    body = {**verl_body("print(1)", None), "files": {"ok.txt": "not base64!"}}
    assert (await verl_post(open_url, body)).status_code == 422


@pytest.mark.parametrize("language", ["cobol", "cpp", "python2"])
async def test_other_languages_get_sandboxfusions_422(open_url: str, language: str) -> None:
    response = await verl_post(open_url, {**verl_body("print(1)", None), "language": language})
    assert response.status_code == 422
    (problem,) = response.json()["detail"]
    assert problem["loc"] == ["body", "language"]
    assert problem["input"] == language
    assert problem["type"] == "literal_error"


async def test_python3_is_accepted_and_missing_fields_are_422(open_url: str) -> None:
    response = await verl_post(open_url, {**verl_body("print(1)", None), "language": "python3"})
    assert response.json()["status"] == "Success"
    async with httpx.AsyncClient(base_url=open_url) as client:
        missing = await client.post("/run_code", json={"language": "python"})
        assert missing.status_code == 422
        assert missing.json()["detail"][0]["loc"] == ["body", "code"]
        garbled = await client.post("/run_code", content=b"{not json")
        assert garbled.status_code == 422


async def test_verl_function_call_harness(open_url: str) -> None:
    solution = (
        "class Solution:\n"
        "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
        "        seen = {}\n"
        "        for i, n in enumerate(nums):\n"
        "            if target - n in seen:\n"
        "                return [seen[target - n], i]\n"
        "            seen[n] = i\n"
    )
    code = function_call_harness(solution, "twoSum")
    body = (await verl_post(open_url, verl_body(code, "[2, 7, 11, 15]\n9"))).json()
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == "[0, 1]\n"
    # A trailing newline breaks verl's harness (json.loads('')): stderr, still exit 0.
    broken = (await verl_post(open_url, verl_body(code, "[2, 7, 11, 15]\n9\n"))).json()
    assert broken["status"] == "Success"
    assert broken["run_result"]["stdout"] == ""


async def test_keyed_mode_needs_a_key(keyed_url: str) -> None:
    anonymous = await verl_post(keyed_url, verl_body("print(1)", None))
    assert anonymous.status_code == 401
    keyed = await verl_post(keyed_url, verl_body("print(1)", None), **{"Api-Key": ALICE})
    assert keyed.json()["status"] == "Success"
    bearer = await verl_post(keyed_url, verl_body("print(1)", None), Authorization=f"Bearer {BOB}")
    assert bearer.status_code == 200
    with pytest.raises(Exception, match="401"):
        await official(keyed_url, code="print(1)")


async def test_open_mode_warns_at_start(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture
) -> None:
    config = Config(data_dir=tmp_path_factory.mktemp("warn"), api_keys=KEYS, open_run_code=True)
    with caplog.at_level("WARNING", logger="corral.http"):
        create_app(engine, config)
    assert any("open_run_code" in r.getMessage() for r in caplog.records)


def _batch_case(index: int) -> dict[str, Any]:
    if index == 7:
        return {"stdin": "loop", "run_timeout": 1, "expected_stdout": "never"}
    expected = str(index * 2) if index % 10 != 3 else "wrong"
    return {"stdin": f"{index}\n", "expected_stdout": expected + "\n"}


async def test_run_code_batch_fifty_cases(real_open_url: str) -> None:
    open_url = real_open_url
    code = (
        "import builtins, os\n"
        "line = input()\n"
        "if line == 'loop':\n"
        "    while True: pass\n"
        "leaked = hasattr(builtins, 'seen') or os.path.exists('marker')\n"
        "builtins.seen = True\n"
        "open('marker', 'w').close()\n"
        "print(int(line) * 2 if not leaked else 'state leaked')\n"
    )
    cases = [_batch_case(i) for i in range(50)]
    cases[11] = {"stdin": "11\n"}  # no expectation: no verdict
    async with httpx.AsyncClient(base_url=open_url, timeout=60) as client:
        response = await client.post("/run_code_batch", json={"code": code, "cases": cases})
    assert response.status_code == 200
    results = response.json()["results"]
    assert len(results) == 50
    for index, result in enumerate(results):
        if index == 7:
            assert result["run_result"]["status"] == "TimeLimitExceeded"
            assert result["passed"] is False
        elif index == 11:
            assert result["passed"] is None
            assert result["run_result"]["stdout"] == "22\n"
        else:
            assert result["run_result"]["stdout"] == f"{index * 2}\n", (index, result)
            assert result["passed"] is (index % 10 != 3), index


async def test_run_code_batch_keyed(keyed_url: str) -> None:
    body = {"code": "print(input())", "cases": [{"stdin": "a", "expected_stdout": "a"}]}
    async with httpx.AsyncClient(base_url=keyed_url) as client:
        assert (await client.post("/run_code_batch", json=body)).status_code == 401
        keyed = await client.post("/run_code_batch", json=body, headers={"Api-Key": ALICE})
        assert keyed.json()["results"][0]["passed"] is True
        empty = await client.post(
            "/run_code_batch", json={"code": "1", "cases": []}, headers={"Api-Key": ALICE}
        )
        assert empty.status_code == 422

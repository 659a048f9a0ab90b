"""SandboxFusion's /run_code and corral's /run_code_batch in other languages, on a live server
over the real sandbox, judged by the official ``sandbox-fusion`` client and its models.

A compiled language's answer carries ``compile_result``; a compile error is ``Failed`` with
the compiler's return code and no ``run_result``; a compile past ``compile_timeout`` is
``TimeLimitExceeded``; a language the host has no toolchain for is SandboxFusion's 422.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
import sandbox_fusion

from corral._config import Config
from corral.engine import Engine, discover_languages
from corral.http import create_app
from tests.http.httpkit import KEYS
from tests.http.test_sandboxfusion import live, verl_body, verl_post

pytestmark = [pytest.mark.anyio, pytest.mark.network, pytest.mark.isolation]

SERVED = discover_languages().served
ADD = (
    "#include <iostream>\n"
    "int main() { long a, b; std::cin >> a >> b; std::cout << a + b << '\\n'; }\n"
)
SUMMARY = sandbox_fusion.SummaryMapping(
    CompileFailed="compile failed",
    CompileTimeout="compile timeout",
    RunFailed="run failed",
    RunTimeout="run timeout",
)


def _needs(language: str) -> None:
    if language not in SERVED:
        pytest.skip(f"no {language} toolchain here: {discover_languages().missing[language]}")


@pytest.fixture(scope="module")
async def url(real_engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    config = Config(
        data_dir=tmp_path_factory.mktemp("langs"), api_keys=KEYS, timeout=20, open_run_code=True
    )
    async with live(create_app(real_engine, config)) as served:
        yield served


async def official(url: str, language: str, **fields: Any) -> sandbox_fusion.RunCodeResponse:
    request = sandbox_fusion.RunCodeRequest(language=language, **fields)
    response: sandbox_fusion.RunCodeResponse = await anyio.to_thread.run_sync(
        lambda: sandbox_fusion.run_code(request, endpoint=url, max_attempts=1)
    )
    return response


async def test_official_client_cpp_stdin_stdout(url: str) -> None:
    _needs("cpp")
    response = await official(url, "cpp", code=ADD, stdin="2 40\n", compile_timeout=30)
    assert response.status == sandbox_fusion.RunStatus.Success
    compiled, run = response.compile_result, response.run_result
    assert compiled is not None
    assert run is not None
    assert (compiled.status, compiled.return_code) == ("Finished", 0)
    assert (run.status, run.return_code, run.stdout) == ("Finished", 0, "42\n")
    assert sandbox_fusion.summary_run_code_result(response, SUMMARY) == "Success"


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("nodejs", "console.log(require('fs').readFileSync(0, 'utf8').trim().toUpperCase())"),
        ("bash", "read x; echo ${x^^}"),
        ("typescript", "const s: string = require('fs').readFileSync(0, 'utf8');"
                       " console.log(s.trim().toUpperCase());"),
        ("rust", "fn main(){let mut s=String::new(); std::io::stdin().read_line(&mut s).unwrap();"
                 " println!(\"{}\", s.trim().to_uppercase());}"),
    ],
)  # fmt: skip
async def test_official_client_other_languages(url: str, language: str, code: str) -> None:
    _needs(language)
    response = await official(url, language, code=code, stdin="shout\n", compile_timeout=30)
    assert response.status == sandbox_fusion.RunStatus.Success, response
    assert response.run_result is not None
    assert response.run_result.stdout == "SHOUT\n"
    assert (response.compile_result is not None) == SERVED[language].reports_compile


async def test_compile_error_is_failed_with_no_run(url: str) -> None:
    _needs("cpp")
    response = await official(url, "cpp", code="int main() { return nope; }")
    assert response.status == sandbox_fusion.RunStatus.Failed
    assert response.run_result is None
    compiled = response.compile_result
    assert compiled is not None
    assert compiled.status == "Finished"
    assert compiled.return_code not in (None, 0)
    assert "nope" in (compiled.stderr or "")
    assert sandbox_fusion.summary_run_code_result(response, SUMMARY) == "compile failed"


async def test_compile_timeout_is_time_limit_exceeded(url: str) -> None:
    _needs("cpp")
    slow = "#include <bits/stdc++.h>\nint main() { std::set<long> s; return s.size(); }\n"
    response = await official(url, "cpp", code=slow, compile_timeout=0.2)
    assert response.status == sandbox_fusion.RunStatus.Failed
    assert response.compile_result is not None
    assert response.compile_result.status == "TimeLimitExceeded"
    assert response.run_result is None
    assert sandbox_fusion.summary_run_code_result(response, SUMMARY) == "compile timeout"


async def test_run_timeout_memory_and_signals(url: str) -> None:
    _needs("cpp")
    body = verl_body("int main() { for (;;) {} }", None, timeout=1)
    spin = (await verl_post(url, {**body, "language": "cpp", "compile_timeout": 30})).json()
    assert (spin["status"], spin["run_result"]["status"]) == ("Failed", "TimeLimitExceeded")
    assert spin["run_result"]["return_code"] is None
    crash = "int main() { volatile int *p = 0; return *p; }"
    body = {**verl_body(crash, None), "language": "cpp"}
    crashed = (await verl_post(url, body)).json()
    assert crashed["status"] == "Failed"
    assert crashed["run_result"]["return_code"] == -11  # SIGSEGV, as Python reports a signal
    eat = (
        "#include <cstdlib>\n#include <cstring>\n#include <cstdio>\n"
        "int main() { size_t n = (size_t)512 << 20; char *p = (char *)malloc(n);"
        ' if (!p) return 4; memset(p, 1, n); puts("fit"); }'
    )
    small = {**verl_body(eat, None), "language": "cpp", "memory_limit_MB": 128}
    refused = (await verl_post(url, small)).json()
    assert refused["status"] == "Failed"
    assert refused["run_result"]["stdout"] == ""
    roomy = (await verl_post(url, {**small, "memory_limit_MB": 1024})).json()
    assert (roomy["status"], roomy["run_result"]["stdout"]) == ("Success", "fit\n")


@pytest.mark.parametrize("language", ["go", "typescript", "cobol"])  # where not served
async def test_a_language_without_toolchain_is_sandboxfusions_422(url: str, language: str) -> None:
    if language in SERVED:
        pytest.skip(f"{language} is served on this host")
    response = await verl_post(url, {**verl_body("x", None), "language": language})
    assert response.status_code == 422
    (problem,) = response.json()["detail"]
    assert problem["loc"] == ["body", "language"]
    assert (problem["type"], problem["input"]) == ("literal_error", language)
    if language != "cobol":
        assert "'cpp'" in problem["msg"] or "cpp" not in SERVED


async def test_run_code_batch_cpp_with_passed_flags(url: str) -> None:
    _needs("cpp")
    cases = [{"stdin": f"{i} {i}\n", "expected_stdout": str(2 * i)} for i in range(12)]
    cases[5]["expected_stdout"] = "wrong"
    cases[7] = {"stdin": "1 2\n"}
    body = {"code": ADD, "language": "cpp", "cases": cases, "compile_timeout": 30}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        response = await client.post("/run_code_batch", json=body)
        broken = await client.post(
            "/run_code_batch",
            json={**body, "code": "int main( {", "cases": cases[:3]},
        )
    results = response.json()["results"]
    assert [r["passed"] for r in results] == [None if i == 7 else i != 5 for i in range(12)]
    assert results[7]["run_result"]["stdout"] == "3\n"
    for result in results:
        sandbox_fusion.RunCodeResponse(**{k: v for k, v in result.items() if k != "passed"})
        assert result["compile_result"]["status"] == "Finished"
    failed = broken.json()["results"]
    assert [r["passed"] for r in failed] == [False, False, False]
    assert all(r["run_result"] is None and r["status"] == "Failed" for r in failed)


async def test_repeated_run_code_compiles_once(real_engine: Engine, url: str) -> None:
    _needs("cpp")
    code = ADD + "// repeated\n"
    before = real_engine._programs.compiles
    async with anyio.create_task_group() as tg:
        answers: list[dict[str, Any]] = []

        async def one(i: int) -> None:
            body = {**verl_body(code, f"{i} 1\n"), "language": "cpp", "compile_timeout": 30}
            answers.append((await verl_post(url, body)).json())

        for i in range(6):
            tg.start_soon(one, i)
    assert sorted(a["run_result"]["stdout"] for a in answers) == [f"{i + 1}\n" for i in range(6)]
    assert real_engine._programs.compiles == before + 1

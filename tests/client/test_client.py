"""corral.client against a live server (over the sandbox's in-process twin): sync and async,
sessions, files, error mapping."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from corral._config import Config
from corral.client import AsyncClient, AsyncSession, Client, RemoteFile
from corral.engine import ExecutionResult
from corral.errors import Busy, InvalidRequest, RemoteAuthError, RemoteUnavailable, SessionNotFound
from corral.http import create_app
from tests.engine.twinkit import StandIn, standing_in, twin_engine
from tests.http.httpkit import ALICE, KEYS
from tests.http.livekit import live

pytestmark = [pytest.mark.anyio, pytest.mark.network]

SPIN = "print('held', flush=True)\nwhile True: pass"
"""Holds its worker until stopped; on the twin a stand-in that prints, then waits."""


def _sync(base_url: str) -> None:
    with Client(base_url, ALICE) as client:
        result = client.run("print('hi')\n6 * 7")
        assert isinstance(result, ExecutionResult)
        assert (result.outcome, result.stdout, result.result) == (
            "ok",
            "hi\n",
            {"text/plain": "42"},
        )
        made = client.run("open('out.csv', 'w').write('a,b\\n')", return_files=True)
        assert made.read_file("out.csv") == b"a,b\n"
        assert made.files[0].size == 4
        out: list[str] = []
        err: list[str] = []
        streamed = client.run(
            "import sys\nprint('one')\nprint('two', file=sys.stderr)",
            on_stdout=out.append,
            on_stderr=err.append,
        )
        assert (
            ("".join(out), "".join(err)) == (streamed.stdout, streamed.stderr) == ("one\n", "two\n")
        )
        failed = client.run("1/0")
        assert failed.outcome == "python_error"
        assert failed.error is not None
        with client.session() as session:
            session.run("x = 20")
            assert session.run("x + 1").result == {"text/plain": "21"}
            assert session.upload("data/in.txt", b"hello") == RemoteFile("data/in.txt", 5)
            session.run("open('up.txt', 'w').write(open('data/in.txt').read().upper())")
            assert session.download("up.txt") == b"HELLO"
            assert [f.path for f in session.list_files()] == ["data/in.txt", "up.txt"]
            with pytest.raises(FileNotFoundError):
                session.download("nope.txt")
        assert session.closed
        with pytest.raises(SessionNotFound):  # the server closed it too
            session.run("x")


async def test_the_sync_client(base_url: str) -> None:
    await anyio.to_thread.run_sync(_sync, base_url)


async def test_the_async_client(base_url: str) -> None:
    async with AsyncClient(base_url, ALICE) as client:
        result = await client.run("sum(range(10))", timeout=5)
        assert result.result == {"text/plain": "45"}
        assert result.evidence is not None
        assert result.evidence.limits["timeout"] == 5
        out: list[str] = []
        await client.run("for i in range(3): print(i)", on_stdout=out.append)
        assert "".join(out) == "0\n1\n2\n"
        async with client.session() as session:
            await session.run("y = 'kept'")
            assert (await session.run("y")).result == {"text/plain": "'kept'"}
            await session.upload("a.bin", bytes(range(256)))
            assert await session.download("a.bin") == bytes(range(256))
            assert await session.list_files() == [RemoteFile("a.bin", 256)]
        with pytest.raises(SessionNotFound):
            await session.run("y")


async def _fail_inside(client: AsyncClient, opened: list[AsyncSession]) -> None:
    async with client.session() as session:
        opened.append(session)
        await session.run("z = 1")
        raise ZeroDivisionError


async def test_a_session_is_closed_when_the_block_raises(base_url: str) -> None:
    async with AsyncClient(base_url, ALICE) as client:
        opened: list[AsyncSession] = []
        with pytest.raises(ZeroDivisionError):
            await _fail_inside(client, opened)
        (session,) = opened
        assert session.closed
        with pytest.raises(SessionNotFound):
            await session.run("z")


async def test_errors_are_corral_errors(base_url: str) -> None:
    async with AsyncClient(base_url, "wrong-key") as stranger:
        with pytest.raises(RemoteAuthError) as denied:
            await stranger.run("1")
        assert denied.value.status == 401
    async with AsyncClient(base_url, ALICE) as client:
        with pytest.raises(InvalidRequest) as invalid:
            await client.run("1", timeout=-1)
        assert (invalid.value.status, invalid.value.field) == (422, "timeout")
    port_without_server = "http://127.0.0.1:9"
    async with AsyncClient(port_without_server, ALICE) as client:
        with pytest.raises(RemoteUnavailable):
            await client.run("1")


async def test_busy_is_retried_a_bounded_number_of_times(tmp_path: Path) -> None:
    """Capacity 1, no queue: while one run holds the worker, every other one is busy."""
    config = Config(mode="gateway", data_dir=tmp_path / "data", api_keys=KEYS, timeout=20)
    async with (
        twin_engine(standing_in({SPIN: StandIn("held\n")}), capacity=1, queue_size=0) as engine,
        live(create_app(engine, config)) as url,
        AsyncClient(url, ALICE) as holder,
        AsyncClient(url, ALICE, retries=1) as client,
    ):
        held = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def occupy() -> None:
                await holder.run(SPIN, on_stdout=lambda _: held.set())

            tg.start_soon(occupy)
            with anyio.fail_after(20):
                await held.wait()
            before = engine.statistics().runs_by_outcome.get("busy", 0)
            with pytest.raises(Busy) as busy:
                await client.run("1")
            assert busy.value.retry_after == 1.0
            assert engine.statistics().runs_by_outcome.get("busy", 0) == before + 2
            tg.cancel_scope.cancel()  # hanging up frees the worker


def _readme_example() -> str:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Python client", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


async def test_the_readme_example_runs(base_url: str) -> None:
    code = _readme_example().replace("http://127.0.0.1:8000", base_url)
    namespace: dict[str, object] = {"api_key": ALICE}
    await anyio.to_thread.run_sync(lambda: exec(code, namespace))  # noqa: S102 - our own README
    assert namespace["made"].read_file("a.csv") == b"x\n"  # type: ignore[attr-defined]

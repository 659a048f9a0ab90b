"""The top-level Python API as a user writes it: corral.Engine, corral.Session, .text, sources."""

from __future__ import annotations

from pathlib import Path

import pytest

import corral
import corral.engine
from corral.errors import UnsupportedSource

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

LIMITS = corral.Limits(timeout=10)


async def test_sources_from_paths_and_bytes_mount_under_their_names(tmp_path: Path) -> None:
    scores = tmp_path / "scores.csv"
    scores.write_bytes(b"name,score\nada,3\nbob,4\n")
    code = (
        "import pandas as pd\n"
        "names = sorted(a['name'] for a in input_assets.values())\n"
        "names, int(pd.read_csv('scores.csv').score.sum()), open('notes.md').read(),"
        " open('source2.txt').read()"
    )
    async with corral.Engine(capacity=1, pool_size=1, limits=LIMITS) as engine:
        result = await engine.run(
            code, sources=[scores, b"loose bytes", ("notes.md", b"# hi\n")], limits=LIMITS
        )
        assert result.outcome == "ok", result.stderr
        assert result.text == (
            "(['notes.md', 'scores.csv', 'source2.txt'], 7, '# hi\\n', 'loose bytes')"
        )
        assert len(result.evidence.inputs if result.evidence else ()) == 3
        with pytest.raises(FileNotFoundError):
            await engine.run("1", sources=[tmp_path / "missing.csv"])
        with pytest.raises(UnsupportedSource):  # bytes that are not what their name says
            await engine.run("1", sources=[("data.xlsx", b"not a zip")])


async def test_session_is_exported_and_an_async_context_manager() -> None:
    async with corral.Engine(capacity=1, pool_size=1, limits=LIMITS) as engine:
        async with await engine.open_session() as session:
            assert isinstance(session, corral.Session)
            await session.run("x = 6")
            assert (await session.run("x * 7")).text == "42"
        assert session.closed


async def test_the_engine_below_sources_says_how_to_mount_files() -> None:
    async with corral.engine.Engine(capacity=1, pool_size=1, limits=LIMITS) as engine:
        with pytest.raises(TypeError, match=r"use corral\.Engine"):
            await engine.run("1", sources=[b"x"])

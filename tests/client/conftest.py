"""A live gateway (real uvicorn on loopback) over an engine on the sandbox's in-process twin:
the client's HTTP handling is the subject here, not the sandbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral._config import Config
from corral._limits import Limits
from corral.engine import Engine
from corral.http import create_app
from tests.engine.twinkit import twin_engine
from tests.http.httpkit import KEYS
from tests.http.livekit import live


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[Engine]:
    async with twin_engine(capacity=2, limits=Limits(timeout=20)) as started:
        yield started


@pytest.fixture(scope="module")
async def base_url(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    data: Path = tmp_path_factory.mktemp("client")
    config = Config(mode="gateway", data_dir=data, api_keys=KEYS, timeout=20)
    async with live(create_app(engine, config)) as url:
        yield url

"""Fixtures for the HTTP front end: one real engine, apps per test, in-process clients."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from corral._config import Config
from corral._limits import Limits
from corral.engine import Engine
from corral.http import create_app
from tests.http.httpkit import ALICE, KEYS, client_for

DIAL_ENV = ("SESSION_ID", "UPLOAD_MAX_SIZE", "MOUNT_FOLDER", "DOWNLOAD_CHUNK_SIZE", "LOG_LEVEL")


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("CORRAL_", "MISTRAL_")) or name in DIAL_ENV:
            monkeypatch.delenv(name)


async def _started_engine(folder: Path, **options: Any) -> AsyncIterator[Engine]:
    options.setdefault("capacity", 2)
    options.setdefault("limits", Limits(timeout=20))
    async with Engine(**options) as engine:
        yield engine


@pytest.fixture(scope="session")
async def engine(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Engine]:
    """The real engine, shared: tests keep to their own keys, sessions and folders."""
    async for started in _started_engine(tmp_path_factory.mktemp("engine")):
        yield started


@pytest.fixture
def engine_factory(tmp_path: Path) -> Callable[..., Any]:
    """``async with engine_factory(capacity=1, ...)``: an engine with special limits."""
    import contextlib

    @contextlib.asynccontextmanager
    async def make(**options: Any) -> AsyncIterator[Any]:
        async for started in _started_engine(tmp_path / "engine", **options):
            yield started

    return make


@pytest.fixture
def gateway_config(tmp_path: Path) -> Config:
    return Config(mode="gateway", data_dir=tmp_path / "data", api_keys=KEYS, timeout=20)


@pytest.fixture
def container_config(tmp_path: Path) -> Config:
    return Config(mode="container", data_dir=tmp_path / "data", timeout=20)


@pytest.fixture
def gateway_app(engine: Engine, gateway_config: Config) -> FastAPI:
    return create_app(engine, gateway_config)


@pytest.fixture
async def client(gateway_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(gateway_app, ALICE) as http:
        yield http


@pytest.fixture
def make_client() -> Callable[..., httpx.AsyncClient]:
    return client_for

"""Fixtures for the HTTP front end: engines, apps per test, in-process clients.

``engine`` is the real engine on the sandbox's in-process twin, one per module (fast, no
isolation, code run in this process): what most tests check is the front end's own
behaviour. ``real_engine`` is the real sandbox, shared, for tests that depend on what happens
inside it; a test that uses it (directly or through ``real_gateway_app``, ``real_client``) is
marked ``isolation``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI

from corral._config import Config
from corral._limits import Limits
from corral.engine import Engine
from corral.http import create_app
from corral.sandbox import InProcessBackend
from tests.http.httpkit import ALICE, KEYS, TIMEOUT, client_for
from tests.http.twinkit import Script, standing_in

DIAL_ENV = ("SESSION_ID", "UPLOAD_MAX_SIZE", "MOUNT_FOLDER", "DOWNLOAD_CHUNK_SIZE", "LOG_LEVEL")


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("CORRAL_", "MISTRAL_")) or name in DIAL_ENV:
            monkeypatch.delenv(name)


async def _started_engine(**options: Any) -> AsyncIterator[Engine]:
    options.setdefault("capacity", 2)
    options.setdefault("limits", Limits(timeout=TIMEOUT))
    async with Engine(**options) as engine:
        yield engine


@pytest.fixture(scope="module")
def stand_ins() -> dict[str, Script]:
    """Scripts the twin plays for code it cannot run in process; a module overrides it."""
    return {}


@pytest.fixture(scope="module")
async def engine(stand_ins: dict[str, Script]) -> AsyncIterator[Engine]:
    """The real engine on the sandbox's in-process twin, shared by a module's tests (they
    keep to their own keys, sessions and folders)."""
    backend = InProcessBackend(standing_in(stand_ins))
    async for started in _started_engine(backend=backend):
        yield started


@pytest.fixture(scope="session")
async def real_engine() -> AsyncIterator[Engine]:
    """The real engine on the real sandbox, shared: tests keep to their own keys, sessions
    and folders. It lives in an asyncio task of its own: first needed in the middle of a
    module, its cancel scopes must not nest inside those of the module's shared fixtures,
    which end before it does."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[Engine] = loop.create_future()
    stop = anyio.Event()

    async def serve() -> None:
        try:
            async for started in _started_engine():
                ready.set_result(started)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    task = loop.create_task(serve())
    try:
        yield await ready
    finally:
        stop.set()
        await task


@pytest.fixture
def engine_factory(stand_ins: dict[str, Script]) -> Callable[..., Any]:
    """``async with engine_factory(capacity=1, ...)``: a twin engine with special limits."""

    @contextlib.asynccontextmanager
    async def make(**options: Any) -> AsyncIterator[Engine]:
        backend = InProcessBackend(standing_in(stand_ins))
        async for started in _started_engine(backend=backend, **options):
            yield started

    return make


@pytest.fixture
def gateway_config(tmp_path: Path) -> Config:
    return Config(mode="gateway", data_dir=tmp_path / "data", api_keys=KEYS, timeout=TIMEOUT)


@pytest.fixture
def container_config(tmp_path: Path) -> Config:
    return Config(mode="container", data_dir=tmp_path / "data", timeout=TIMEOUT)


@pytest.fixture
def gateway_app(engine: Engine, gateway_config: Config) -> FastAPI:
    return create_app(engine, gateway_config)


@pytest.fixture
def real_gateway_app(real_engine: Engine, gateway_config: Config) -> FastAPI:
    return create_app(real_engine, gateway_config)


@pytest.fixture
async def client(gateway_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(gateway_app, ALICE) as http:
        yield http


@pytest.fixture
async def real_client(real_gateway_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(real_gateway_app, ALICE) as http:
        yield http


@pytest.fixture
def make_client() -> Callable[..., httpx.AsyncClient]:
    return client_for

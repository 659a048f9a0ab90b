"""Fixtures: the fake Mistral API behind an in-process transport or a loopback server."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from corral.mistral import MistralClient, MistralSettings
from corral.tools import ToolRegistry

from .fake_mistral import API_KEY, FakeMistral

BASE_URL = "http://127.0.0.1:9"  # never dialled: the mock transport answers in process


@pytest.fixture
def anyio_backend() -> str:
    # Function scope: every test here builds its own client and fake.
    return "asyncio"


@pytest.fixture
def fake() -> Iterator[FakeMistral]:
    fake = FakeMistral()
    yield fake
    assert fake.violations == []


@pytest.fixture
async def client(fake: FakeMistral) -> AsyncIterator[MistralClient]:
    async with httpx.AsyncClient(transport=fake.transport()) as http:
        yield MistralClient(API_KEY, BASE_URL, http=http)


@pytest.fixture
def settings() -> MistralSettings:
    return MistralSettings(api_key=API_KEY, base_url=BASE_URL)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


@pytest.fixture
def loopback(fake: FakeMistral) -> Iterator[str]:
    """The fake on a real HTTP server at 127.0.0.1 (tests using it are marked network)."""

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length) if length else b""
            url = f"http://{self.headers['Host']}{self.path}"  # the host the client dialled
            status, ctype, content = fake.handle(
                self.command, url, dict(self.headers.items()), body
            )
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST = _serve

        def log_message(self, format: str, *args: object) -> None:
            pass  # keep pytest output clean; the fake records requests itself

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

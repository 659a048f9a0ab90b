"""A real uvicorn server on 127.0.0.1 for an app, for tests that need real sockets."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator

import anyio
import uvicorn
from fastapi import FastAPI


@contextlib.asynccontextmanager
async def live(app: FastAPI) -> AsyncIterator[str]:
    """Serve ``app`` on a loopback port for the block; yields its base URL."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", server_header=False)
    server = uvicorn.Server(config)
    with listener:
        async with anyio.create_task_group() as tg:
            # The socket listens already: connections wait in its backlog until uvicorn accepts.
            tg.start_soon(lambda: server.serve(sockets=[listener]))
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                server.should_exit = True

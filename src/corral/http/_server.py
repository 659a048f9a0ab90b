"""``serve``: build the engine from the config, run uvicorn, close the engine on the way out."""

from __future__ import annotations

import logging
import socket
from typing import Any

import anyio
import uvicorn

from corral._config import Config
from corral.engine import Engine
from corral.http._app import create_app

__all__ = ["engine_options", "serve", "serve_async"]

_CONTAINER_SESSION_LIFETIME = 10 * 365 * 24 * 3600.0  # seconds; DIAL's container never expires


def engine_options(config: Config) -> dict[str, Any]:
    """The ``Engine`` constructor arguments this config asks for."""
    options = config.engine_options()
    if config.mode == "container":
        # The platform, not corral, ends this session.
        options["session_idle_timeout"] = _CONTAINER_SESSION_LIFETIME
        # DIAL's container keeps its files in MOUNT_FOLDER, where a volume or a sidecar sees
        # them and where they outlive a restart.
        options["session_data_dir"] = config.mount_folder
    return options


async def serve_async(
    config: Config,
    *,
    sockets: list[socket.socket] | None = None,
    stop: anyio.Event | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM (or ``stop``); the engine starts first and closes last.

    Args:
        config: what to serve; ``bind_host``/``bind_port`` unless ``sockets`` are given.
        sockets: already listening sockets (socket activation, tests on port 0).
        stop: set it to shut down gracefully, as SIGTERM does.

    Raises:
        ConfigError: the config cannot serve (gateway mode without keys, ...).
        IsolationError: this host cannot build the sandbox.
    """
    logging.basicConfig(level=config.log_level.upper())
    config.data_dir.mkdir(parents=True, exist_ok=True)
    async with Engine(**engine_options(config)) as engine:
        app = create_app(engine, config)
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=config.bind_host,
                port=config.bind_port,
                log_level=config.log_level.lower(),
                timeout_keep_alive=config.timeout_keep_alive,
                lifespan="off",
                server_header=False,
            )
        )
        async with anyio.create_task_group() as tg:
            if stop is not None:
                tg.start_soon(_stop_on, stop, server)
            await server.serve(sockets=sockets)
            tg.cancel_scope.cancel()


async def _stop_on(stop: anyio.Event, server: uvicorn.Server) -> None:
    await stop.wait()
    server.should_exit = True


def serve(config: Config) -> None:
    """Blocking form of :func:`serve_async`, for ``corral serve``."""
    anyio.run(serve_async, config)

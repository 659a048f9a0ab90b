"""``serve``: build the engine from the config, run uvicorn, close the engine on the way out."""

from __future__ import annotations

import contextlib
import logging
import math
import resource
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import uvicorn

from corral import _fs
from corral._config import Config
from corral.engine import Engine
from corral.errors import ConfigError
from corral.http._app import create_app
from corral.http._connections import ConnectionGuard, guarded_protocol, networks_of
from corral.network import CertificateAuthority, Egress

__all__ = ["engine_options", "serve", "serve_async", "uvicorn_config"]

_CONTAINER_SESSION_LIFETIME = 10 * 365 * 24 * 3600.0  # seconds; DIAL's container never expires
_CA_FOLDER = "egress-ca"  # in the data folder: corral's CA for header injection (key 0600)
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_EXIT_POLL = 0.1  # seconds; uvicorn itself looks at should_exit this often
_ANSWER_GRACE = 7.0  # seconds after the grace for cancelled runs to answer (engine: 5 s)


def engine_options(config: Config) -> dict[str, Any]:
    """The ``Engine`` constructor arguments this config asks for."""
    options = config.engine_options()
    if config.mode == "container":
        # The platform, not corral, ends this session.
        options["session_idle_timeout"] = _CONTAINER_SESSION_LIFETIME
        # DIAL's container keeps its files in MOUNT_FOLDER, where a volume or a sidecar sees
        # them and where they outlive a restart.
        options["session_data_dir"] = config.mount_folder
        options["paused_dir"] = None  # one session, DIAL's: its files are MOUNT_FOLDER's
    else:
        options["egress"] = egress_for(config)
    return options


def egress_for(config: Config) -> Egress | None:
    """The egress side ``[network]`` asks for (None: no sandbox has a network), with corral's
    CA in the data folder, made on first use, for the hosts whose requests get headers."""
    ceiling = config.network_ceiling()
    if not ceiling.enabled:
        return None
    return Egress(ceiling, ca=CertificateAuthority(config.data_dir / _CA_FOLDER))


_uvicorn_log = logging.getLogger("uvicorn.error")


class _Server(uvicorn.Server):
    """uvicorn whose SIGINT/SIGTERM start a graceful stop and nothing more.

    uvicorn re-raises a caught signal once it has served, which would end the process before
    the engine has stopped its zygotes and workers; here the signal only asks to stop, and
    ``serve_async`` returns normally once everything is down.
    """

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if sockets and self.started:
            # uvicorn names the address only when it binds it itself; say it for sockets
            # bound before (corral serve binds first), in uvicorn's words, once serving.
            for sock in sockets:
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    host, port = sock.getsockname()[:2]
                    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
                    _uvicorn_log.info("Uvicorn running on http://%s:%d", shown, port)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)


async def serve_async(
    config: Config,
    *,
    sockets: list[socket.socket] | None = None,
    stop: anyio.Event | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM (or ``stop``); the engine starts first and closes last.

    A stop is graceful: no new connection or run is admitted, runs in flight get
    ``shutdown_grace`` seconds to finish, then are cancelled ("the server is shutting down")
    and answered; then the engine stops its workers and zygotes.

    Args:
        config: what to serve; ``bind_host``/``bind_port`` unless ``sockets`` are given.
        sockets: already listening sockets (socket activation, tests on port 0).
        stop: set it to shut down gracefully, as SIGTERM does.

    Raises:
        ConfigError: the config cannot serve (gateway mode without keys, ...).
        IsolationError: this host cannot build the sandbox.
    """
    logging.basicConfig(level=config.log_level.upper())
    logging.getLogger("asyncio").addFilter(_AcceptFailuresOncePer())
    _more_descriptors()
    _fs.make_private_dir(config.data_dir)  # keys, tenants' files: 0700 whatever the umask
    with _stop_requests() as stopping:
        await _serve_engine(config, sockets, stop, stopping)


_ACCEPT_FAILURE = "socket.accept() out of system resource"
_ACCEPT_LOG_INTERVAL = 10.0  # seconds between two reports of a failing accept()


class _AcceptFailuresOncePer(logging.Filter):
    """asyncio logs every failed ``accept()`` while descriptors run out, which a flood of idle
    connections turns into hundreds of megabytes of log a minute: one line per interval says
    the same."""

    def __init__(self) -> None:
        super().__init__()
        self._last = -math.inf

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(_ACCEPT_FAILURE):
            return True
        now = time.monotonic()
        if now - self._last < _ACCEPT_LOG_INTERVAL:
            return False
        self._last = now
        return True


def _more_descriptors() -> None:
    """Raise the soft descriptor limit to the hard one: every connection and worker costs
    descriptors, and running out fails requests (never the process, but still)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class _StopRequest:
    """SIGINT/SIGTERM outside uvicorn's own handling (while the engine starts, and while it
    stops after the server has): a request to stop, never an abrupt end that would skip
    answering runs and stopping the zygotes."""

    def __init__(self) -> None:
        self.requested = False
        self.server: uvicorn.Server | None = None

    def __call__(self, signum: int, frame: object) -> None:
        self.requested = True
        if self.server is not None:
            self.server.should_exit = True


@contextlib.contextmanager
def _stop_requests() -> Iterator[_StopRequest]:
    request = _StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    originals = {sig: signal.signal(sig, request) for sig in _STOP_SIGNALS}
    try:
        yield request
    finally:
        for sig, handler in originals.items():
            signal.signal(sig, handler)


async def _serve_engine(
    config: Config,
    sockets: list[socket.socket] | None,
    stop: anyio.Event | None,
    stopping: _StopRequest,
) -> None:
    async with Engine(**engine_options(config)) as engine:
        if not engine.backend.isolated:
            raise ConfigError(
                "corral serve runs code in the isolated sandbox only, never in process"
            )
        if stopping.requested:
            return
        server = _Server(uvicorn_config(create_app(engine, config), config))
        async with anyio.create_task_group() as tg:
            if stop is not None:
                tg.start_soon(_stop_on, stop, server)
            tg.start_soon(_drain_on_exit, server, engine, config.shutdown_grace)
            stopping.server = server
            server.should_exit = stopping.requested  # asked while the engine was starting
            await server.serve(sockets=sockets)
            with anyio.CancelScope(shield=True):
                await engine.drain(0)  # nothing is left to answer: stop the stragglers now
                # Every live session and sandbox to the data folder, for the next server.
                await engine.paused.pause_all(config.shutdown_grace)
            tg.cancel_scope.cancel()


def uvicorn_config(app: Any, config: Config) -> uvicorn.Config:
    """How ``corral serve`` runs uvicorn for ``app``: the connection guard, and client
    addresses rewritten from ``X-Forwarded-For`` only for ``trusted_proxies`` (uvicorn's
    default believes the header from 127.0.0.1, where any local process can send it)."""
    guard = ConnectionGuard(
        header_timeout=config.header_timeout,
        max_per_client=config.max_connections_per_client,
        trusted=config.trusted_proxies,
    )
    return uvicorn.Config(
        app,
        host=config.bind_host,
        port=config.bind_port,
        http=guarded_protocol(guard),
        proxy_headers=bool(config.trusted_proxies),
        forwarded_allow_ips=[str(n) for n in networks_of(config.trusted_proxies)],
        log_level=config.log_level.lower(),
        timeout_keep_alive=config.timeout_keep_alive,
        # The engine answers every run within the grace and the cancel bound; past that,
        # uvicorn may drop what is left.
        timeout_graceful_shutdown=math.ceil(config.shutdown_grace + _ANSWER_GRACE),
        lifespan="off",
        server_header=False,
    )


async def _stop_on(stop: anyio.Event, server: uvicorn.Server) -> None:
    await stop.wait()
    server.should_exit = True


async def _drain_on_exit(server: uvicorn.Server, engine: Engine, grace: float) -> None:
    while not server.should_exit:  # noqa: ASYNC110 - set by a signal handler, not an event
        await anyio.sleep(_EXIT_POLL)  # set from a signal handler: nothing to wait on
    await engine.drain(grace)


def serve(config: Config) -> None:
    """Blocking form of :func:`serve_async`, for ``corral serve``."""
    anyio.run(serve_async, config)

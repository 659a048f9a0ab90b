"""``corral serve`` and ``corral mcp``: long-running front ends over one engine."""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import ipaddress
import os
import secrets
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import anyio

from corral import _fs
from corral._config import ApiKey, Config
from corral.cli._exit import EXIT_OK
from corral.e2b import new_e2b_key

__all__ = ["local_api_key", "mcp_command", "serve_command"]

_KEY_FILE = "api-key"
_E2B_KEY_FILE = "e2b-api-key"


def local_api_key(
    data_dir: Path, name: str = _KEY_FILE, make: Callable[[], str] | None = None
) -> tuple[str, bool]:
    """The key in ``data_dir/name``, created (mode 0600) on first use.

    Returns the key and whether it was just created.
    """
    _fs.make_private_dir(data_dir)
    path = data_dir / name
    try:
        return path.read_text().strip(), False
    except FileNotFoundError:
        pass
    key = make() if make is not None else "corral-" + secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    return key, True


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``, bound before anything else starts.

    Raises:
        OSError: the address cannot be bound; its ``strerror`` names the address.
    """
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, IndexError) as exc:
        raise OSError(errno.EADDRNOTAVAIL, f"{host}:{port}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"{host}:{port}: {exc.strerror}") from exc
    sock.set_inheritable(False)
    return sock


def container_warning(config: Config) -> str | None:
    """What to say when container mode listens beyond loopback without ``SESSION_ID``."""
    if config.mode != "container" or config.session_id is not None:
        return None
    try:
        if ipaddress.ip_address(config.bind_host).is_loopback:
            return None
    except ValueError:
        if config.bind_host == "localhost":
            return None
    return (
        f"warning: container mode listens on {config.bind_host} without SESSION_ID and has no "
        "authentication: anyone who reaches this port can run code and read its files. Set "
        "SESSION_ID (DIAL sends it as x-dial-session-id) or bind --host 127.0.0.1."
    )


def serve_command(args: argparse.Namespace) -> int:
    from corral.http import serve_async

    config = Config.load(
        flags={
            "config": args.config,
            "host": args.host,
            "port": args.port,
            "mode": args.mode,
            "header_timeout": args.header_timeout,
        }
    )
    # Bound first: a port in use is one line at once, not an error after the engine started.
    sock = listen(config.bind_host, config.bind_port)
    warning = container_warning(config)
    if warning is not None:
        print(f"corral: {warning}", file=sys.stderr)
    try:
        if config.mode == "gateway" and not config.api_keys:
            # Embedded defaults still require a key: one is made once and kept with the data.
            key, created = local_api_key(config.data_dir)
            # A second key in the shape the E2B SDK checks (e2b_<hex>), for E2B_API_KEY.
            e2b_key, _ = local_api_key(config.data_dir, _E2B_KEY_FILE, new_e2b_key)
            config = config.replace(
                api_keys=(ApiKey(key=key, user="local"), ApiKey(key=e2b_key, user="local-e2b"))
            )
            where = config.data_dir / _KEY_FILE
            # The key is shown once, when it is made, and only on a terminal: a service's
            # stderr is a log (the journal), and keys never go into logs. It stays in its
            # 0600 file.
            if created and sys.stderr.isatty():
                print(
                    f"corral: created {where}\ncorral: Api-Key: {key}\n"
                    f"corral: E2B_API_KEY={e2b_key}  (kept in {config.data_dir / _E2B_KEY_FILE})",
                    file=sys.stderr,
                )
            else:
                print(
                    f"corral: no API keys configured; using the keys in {where} and "
                    f"{config.data_dir / _E2B_KEY_FILE} (for E2B_API_KEY)",
                    file=sys.stderr,
                )
        host = f"[{config.bind_host}]" if ":" in config.bind_host else config.bind_host
        # Connections wait in the socket's backlog until the engine is up, then are served.
        print(
            f"corral: serving the {config.mode} API on http://{host}:{sock.getsockname()[1]}",
            file=sys.stderr,
        )
        with contextlib.suppress(KeyboardInterrupt):
            anyio.run(functools.partial(serve_async, config, sockets=[sock]))
    finally:
        sock.close()
    return EXIT_OK


def mcp_command(args: argparse.Namespace) -> int:
    config = Config.load(flags={"config": args.config})
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(_serve_mcp, config, args.http)
    return EXIT_OK


async def _serve_mcp(config: Config, http_port: int | None) -> None:
    from corral.mcp import serve_mcp
    from corral.mistral import MistralClient, MistralSettings, register_mistral_tools
    from corral.tools import Invocation, ToolRegistry

    settings = MistralSettings.load(config.raw_toml, os.environ)
    if not settings.api_key:
        await serve_mcp(config, http_port=http_port)
        return

    def warn(text: str) -> None:
        print(f"corral: {text}", file=sys.stderr)

    async with MistralClient.from_settings(settings) as client:

        async def mistral_tools(registry: ToolRegistry, _invocation: Invocation) -> object:
            # One registry and one connector loader per MCP session.
            return await register_mistral_tools(registry, settings, client, warn=warn)

        await serve_mcp(config, http_port=http_port, extra_tools=mistral_tools)

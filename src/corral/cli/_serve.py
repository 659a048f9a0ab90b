"""``corral serve`` and ``corral mcp``: long-running front ends over one engine."""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path

import anyio

from corral import _fs
from corral._config import ApiKey, Config
from corral.cli._main import EXIT_OK
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


def serve_command(args: argparse.Namespace) -> int:
    from corral.http import serve

    config = Config.load(
        flags={"config": args.config, "host": args.host, "port": args.port, "mode": args.mode}
    )
    if config.mode == "gateway" and not config.api_keys:
        # Embedded defaults still require a key: one is made once and kept with the data.
        key, created = local_api_key(config.data_dir)
        # A second key in the shape the E2B SDK checks (e2b_<hex>), for E2B_API_KEY.
        e2b_key, _ = local_api_key(config.data_dir, _E2B_KEY_FILE, new_e2b_key)
        config = config.replace(
            api_keys=(ApiKey(key=key, user="local"), ApiKey(key=e2b_key, user="local-e2b"))
        )
        where = config.data_dir / _KEY_FILE
        # The key is shown once, when it is made, and only on a terminal: a service's stderr
        # is a log (the journal), and keys never go into logs. It stays in its 0600 file.
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
    serve(config)
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

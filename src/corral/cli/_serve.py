"""``corral serve`` and ``corral mcp``: long-running front ends over one engine."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

from corral._config import ApiKey, Config
from corral.cli._main import EXIT_OK

__all__ = ["local_api_key", "mcp_command", "serve_command"]

_KEY_FILE = "api-key"


def local_api_key(data_dir: Path) -> tuple[str, bool]:
    """The key in ``data_dir/api-key``, created (mode 0600) on first use.

    Returns the key and whether it was just created.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / _KEY_FILE
    try:
        return path.read_text().strip(), False
    except FileNotFoundError:
        pass
    key = "corral-" + secrets.token_urlsafe(24)
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
        config = config.replace(api_keys=(ApiKey(key=key, user="local"),))
        where = config.data_dir / _KEY_FILE
        verb = "created" if created else "using"
        print(
            f"corral: no API keys configured; {verb} {where}\ncorral: Api-Key: {key}",
            file=sys.stderr,
        )
    serve(config)
    return EXIT_OK


def mcp_command(args: argparse.Namespace) -> int:
    from corral.mcp import run_mcp

    config = Config.load(flags={"config": args.config})
    run_mcp(config, http_port=args.http)
    return EXIT_OK

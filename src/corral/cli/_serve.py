"""``corral serve`` and ``corral mcp``: long-running front ends over one engine."""

from __future__ import annotations

import argparse

from corral._config import Config
from corral.cli._main import EXIT_OK

__all__ = ["mcp_command", "serve_command"]


def serve_command(args: argparse.Namespace) -> int:
    from corral.http import serve

    config = Config.load(
        flags={"config": args.config, "host": args.host, "port": args.port, "mode": args.mode}
    )
    serve(config)
    return EXIT_OK


def mcp_command(args: argparse.Namespace) -> int:
    from corral.mcp import run_mcp

    config = Config.load(flags={"config": args.config})
    run_mcp(config, http_port=args.http)
    return EXIT_OK

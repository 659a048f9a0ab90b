"""``python -m corral.mcp [--http PORT] [--config FILE]``: the MCP server without the CLI."""

from __future__ import annotations

import argparse

from corral._config import Config
from corral.mcp._serve import run_mcp


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m corral.mcp", description=__doc__)
    parser.add_argument("--http", type=int, metavar="PORT", help="streamable HTTP on PORT")
    parser.add_argument("--config", metavar="FILE", help="corral.toml")
    args = parser.parse_args(argv)
    run_mcp(Config.load(flags={"config": args.config}), http_port=args.http)


if __name__ == "__main__":
    main()

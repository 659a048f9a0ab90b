"""Argument parsing and dispatch for every ``corral`` subcommand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from corral.errors import ConfigError, CorralError

__all__ = ["main"]

EXIT_OK = 0
EXIT_PYTHON_ERROR = 1
EXIT_INVALID = 2
EXIT_OTHER = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="corral", description="A self-hosted code interpreter for LLM agents."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run Python once in a fresh isolated worker")
    run.add_argument("file", nargs="?", help="a Python file, or - for standard input")
    run.add_argument("-c", dest="code", metavar="CODE", help="the code to run")
    run.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="PATH",
        help="mount a file as an input (CSV, TSV, XLSX, JSON, text); repeatable",
    )
    run.add_argument("--timeout", type=float, metavar="S", help="seconds for the whole run")
    run.add_argument("--json", action="store_true", help="print the full result as JSON")
    run.add_argument("--config", metavar="FILE", help="corral.toml")
    run.add_argument(
        "args", nargs=argparse.REMAINDER, help="arguments for the code, in its sys.argv[1:]"
    )

    commands.add_parser(
        "doctor", help="report the isolation features this kernel offers"
    ).add_argument("--json", action="store_true", help="print the report as JSON")

    serve = commands.add_parser("serve", help="serve the HTTP API")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to bind (default 8080)")
    serve.add_argument("--mode", choices=["gateway", "container"], help="API flavour")
    serve.add_argument("--config", metavar="FILE", help="corral.toml")

    mcp = commands.add_parser("mcp", help="serve the MCP server (stdio by default)")
    mcp.add_argument("--http", type=int, metavar="PORT", help="streamable HTTP on PORT")
    mcp.add_argument("--config", metavar="FILE", help="corral.toml")

    tools = commands.add_parser("tools", help="list or call the registry's tools")
    tool_commands = tools.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    tool_commands.add_parser("list", help="list the active tools").add_argument(
        "--config", metavar="FILE", help="corral.toml"
    )
    call = tool_commands.add_parser("call", help="call one tool and print its result as JSON")
    call.add_argument("name")
    call.add_argument("arguments", help="the arguments as a JSON object")
    call.add_argument("--config", metavar="FILE", help="corral.toml")

    from corral.cli._batch import add_batch_parser

    add_batch_parser(commands)

    chat = commands.add_parser("chat", help="a terminal agent on Mistral using corral's tools")
    chat.add_argument("--model", default=None, help="chat model (default mistral-medium-latest)")
    chat.add_argument("--config", metavar="FILE", help="corral.toml")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``corral`` console script; exits with the command's code."""
    args = _parser().parse_args(argv)
    try:
        code = _dispatch(args)
    except ConfigError as exc:
        print(f"corral: configuration error: {exc}", file=sys.stderr)
        code = EXIT_INVALID
    except CorralError as exc:
        print(f"corral: {exc}", file=sys.stderr)
        code = EXIT_OTHER
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # The reader went away (`| head`); say nothing more on a closed pipe.
        sys.stderr.close()
        code = EXIT_OK
    sys.exit(code)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        from corral.cli._run import run_command

        return run_command(args)
    if args.command == "doctor":
        from corral.cli._doctor import doctor_command

        return doctor_command(args)
    if args.command == "serve":
        from corral.cli._serve import serve_command

        return serve_command(args)
    if args.command == "mcp":
        from corral.cli._serve import mcp_command

        return mcp_command(args)
    if args.command == "batch":
        from corral.cli._batch import batch_command

        return batch_command(args)
    if args.command == "tools":
        from corral.cli._tools import tools_command

        return tools_command(args)
    from corral.cli._tools import chat_command

    return chat_command(args)

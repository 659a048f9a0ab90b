"""Argument parsing and dispatch for every ``corral`` subcommand."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from corral.cli._exit import EXIT_INVALID, EXIT_OK, EXIT_OTHER
from corral.cli._template_args import add_template_parser
from corral.errors import ConfigError, CorralError, IsolationError

__all__ = ["main"]

_CHAT_MODEL = "mistral-medium-latest"  # corral.mistral.DEFAULT_CHAT_MODEL, without importing it


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="corral",
        description="A self-hosted code interpreter for LLM agents.",
        epilog="Configuration keys: docs/configuration.md (corral.toml, CORRAL_* variables).",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run a program once in a fresh isolated worker")
    run.add_argument("file", nargs="?", help="a Python file, or - for standard input")
    run.add_argument("-c", dest="code", metavar="CODE", help="the code to run")
    run.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="PATH",
        help="mount a file as an input (CSV, TSV, XLSX, JSON and text also as text; any "
        "other file as its bytes); repeatable",
    )
    run.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="seconds for the whole run (default: [engine] timeout of corral.toml)",
    )
    run.add_argument(
        "--out-dir",
        metavar="DIR",
        help="write the files the code makes and its display images (display-1.png, ...) here",
    )
    run.add_argument(
        "--network",
        action="append",
        default=[],
        metavar="DOMAIN",
        help="let the run reach this domain, wildcard (*.example.com), address or CIDR, "
        "within [network] allow when corral.toml sets one; repeatable",
    )
    run.add_argument(
        "--language",
        metavar="L",
        help="the code's language: python, cpp, nodejs, java, rust, go, typescript or bash "
        "(default: from FILE's suffix, else python; corral doctor lists those served)",
    )
    run.add_argument(
        "--template", metavar="NAME", help="run in a template's sandbox (corral template list)"
    )
    run.add_argument("--json", action="store_true", help="print the full result as JSON")
    run.add_argument("--config", metavar="FILE", help="corral.toml")
    run.add_argument(
        "args", nargs=argparse.REMAINDER, help="arguments for the code, in its sys.argv[1:]"
    )

    add_template_parser(commands)

    commands.add_parser(
        "doctor", help="report the isolation features this kernel offers"
    ).add_argument("--json", action="store_true", help="print the report as JSON")

    serve = commands.add_parser("serve", help="serve the HTTP API")
    serve.add_argument(
        "--host", help="address to bind (default 127.0.0.1; 0.0.0.0 in container mode)"
    )
    serve.add_argument(
        "--port", type=int, help="port to bind (default 8000; 8080 in container mode)"
    )
    serve.add_argument(
        "--mode",
        choices=["gateway", "container"],
        help="gateway: DIAL Core's operations (default); container: one DIAL container",
    )
    serve.add_argument(
        "--header-timeout",
        type=float,
        metavar="SECONDS",
        help="close a connection that has not sent its whole request head by then (default 10)",
    )
    serve.add_argument("--config", metavar="FILE", help="corral.toml")

    mcp = commands.add_parser("mcp", help="serve the MCP server (stdio by default)")
    mcp.add_argument(
        "--http", type=int, metavar="PORT", help="streamable HTTP on 127.0.0.1:PORT/mcp"
    )
    mcp.add_argument("--config", metavar="FILE", help="corral.toml")

    tools = commands.add_parser("tools", help="list or call the registry's tools")
    tool_commands = tools.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    tool_commands.add_parser(
        "list", help="list the tools (Mistral's are unavailable without MISTRAL_API_KEY)"
    ).add_argument("--config", metavar="FILE", help="corral.toml")
    call = tool_commands.add_parser("call", help="call one tool and print its result as JSON")
    call.add_argument("name")
    call.add_argument("arguments", help="the arguments as a JSON object")
    call.add_argument("--config", metavar="FILE", help="corral.toml")

    from corral.cli._batch import add_batch_parser

    add_batch_parser(commands)

    chat = commands.add_parser("chat", help="a terminal agent on Mistral using corral's tools")
    chat.add_argument("--model", default=None, help=f"chat model (default {_CHAT_MODEL})")
    chat.add_argument("--config", metavar="FILE", help="corral.toml")
    return parser


class _Version(argparse.Action):
    """``--version``, reading the installed version only when asked (it costs an import)."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kw: object) -> None:
        print(f"corral {_version()}")
        parser.exit()


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("corral")
    except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        return "unknown"


def _root_cause(exc: BaseException) -> BaseException:
    """The one exception a start-up failure is about, out of anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        leaves = [e for e in exc.exceptions if not isinstance(e, KeyboardInterrupt)]
        exc = leaves[0] if leaves else exc.exceptions[0]
    return exc


def _start_up_error(exc: BaseException) -> str | None:
    """One line for a failure to start (bad config, busy port, no sandbox), else None."""
    if isinstance(exc, ConfigError):
        return f"configuration error: {exc}"
    if isinstance(exc, IsolationError):
        return f"cannot isolate workers on this host: {exc}"
    if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
        return f"cannot listen: {exc.strerror or exc}"
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM):
        return f"not permitted: {exc}"
    return None


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``corral`` console script; exits with the command's code.

    Start-up failures (configuration, a port in use, no isolation) are one line on stderr
    and exit code 2; the traceback would say nothing more to the person who typed it.

    Without ``argv`` (the console script) it owns the process, and ``corral run`` leaves
    without the interpreter's teardown once its output is flushed: its engine is closed and
    its zygote reaped by then, and freeing every module's objects one by one costs the
    command a tenth of its wall time on a busy machine.
    """
    owns_process = argv is None
    args = _parser().parse_args(argv)
    try:
        _check_the_config(args)
        code = _dispatch(args)
    except BaseException as raised:  # sorted below; anything else is re-raised
        exc = _root_cause(raised)
        line = _start_up_error(exc)
        if line is not None:
            print(f"corral {args.command}: {line}", file=sys.stderr)
            code = EXIT_INVALID
        elif isinstance(exc, CorralError):
            print(f"corral {args.command}: {exc}", file=sys.stderr)
            code = EXIT_OTHER
        elif isinstance(exc, KeyboardInterrupt):
            code = 130
        elif isinstance(exc, BrokenPipeError):
            # The reader went away (`| head`); say nothing more on a closed pipe.
            sys.stderr.close()
            code = EXIT_OK
        else:
            raise
    if owns_process and args.command == "run":
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> NoReturn:
    """Flush what is buffered, then end the process at once."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone (`| head`) or a stream closed above
            continue
    os._exit(code)


def _check_the_config(args: argparse.Namespace) -> None:
    """Read the configuration before a command imports its modules: a typo in corral.toml is
    one line at once, not after the second that the server's or the agent SDK's imports take.
    ``corral run`` reads it itself, with no import worth saving before it."""
    if args.command != "run" and hasattr(args, "config"):
        from corral._config import Config

        Config.load(flags={"config": args.config})


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
    if args.command == "template":
        from corral.cli._template import template_command

        return template_command(args)
    if args.command == "tools":
        from corral.cli._tools import tools_command

        return tools_command(args)
    from corral.cli._tools import chat_command

    return chat_command(args)

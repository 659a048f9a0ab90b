"""``corral run``: one fresh isolated run from a file, ``-c`` or standard input."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import anyio

from corral._config import Config
from corral.cli._main import EXIT_INVALID, EXIT_OK, EXIT_OTHER, EXIT_PYTHON_ERROR
from corral.engine import Engine, ExecutionResult, Input
from corral.errors import SourceError

__all__ = ["run_command"]


def _argv(args: argparse.Namespace) -> list[str]:
    """``sys.argv`` as ``python`` sets it: ``-c``, ``-`` or FILE, then the arguments."""
    if args.code is not None:
        # As with python -c, what follows the code is its arguments.
        return ["-c", *([args.file] if args.file is not None else []), *args.args]
    return [args.file or "-", *args.args]


def _read_code(args: argparse.Namespace) -> str:
    if args.code is not None:
        return str(args.code)
    if args.file in (None, "-"):
        if args.file is None and sys.stdin.isatty():
            raise ValueError("nothing to run: give FILE, -c CODE, or - for standard input")
        return sys.stdin.read()
    return Path(args.file).read_text(encoding="utf-8")


def _inputs(paths: list[str]) -> tuple[list[Input], dict[str, str]]:
    from corral.sources import SourceRegistry

    registry = SourceRegistry()
    inputs: list[Input] = []
    names: dict[str, str] = {}
    for name in paths:
        path = Path(name)
        source = registry.add_attachment(path.read_bytes(), path.name)
        inputs.append(dataclasses.replace(registry.to_input(source), name=path.name))
        names[source.id] = path.name
    return inputs, names


def _print_human(result: ExecutionResult) -> None:
    sys.stdout.write(result.stdout)
    if result.result:
        text = result.result.get("text/plain", "")
        sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
    sys.stdout.flush()
    sys.stderr.write(result.stderr)
    for entry in result.display:
        kinds = ", ".join(sorted(k for k in entry if k != "text/plain"))
        sys.stderr.write(f"[display: {kinds or 'text/plain'}]\n")
    for info in result.files:
        sys.stderr.write(f"[file: {info.path} ({info.size} bytes)]\n")
    for channel, count in result.omitted.items():
        if count:
            sys.stderr.write(f"[{channel}: {count} characters omitted]\n")
    if result.outcome not in ("ok", "python_error") and not result.stderr.rstrip().endswith(
        result.message
    ):
        sys.stderr.write(f"[{result.outcome}] {result.message}\n")


def run_command(args: argparse.Namespace) -> int:
    try:
        code = _read_code(args)
        inputs, names = _inputs(args.source)
    except (OSError, UnicodeDecodeError, ValueError, SourceError) as exc:
        print(f"corral run: {exc}", file=sys.stderr)
        return EXIT_INVALID
    config = Config.load(flags={"config": args.config})
    limits = config.limits()
    if args.timeout is not None:
        if not args.timeout > 0:
            print("corral run: --timeout must be positive", file=sys.stderr)
            return EXIT_INVALID
        limits = limits.replace(timeout=args.timeout)
    if names and not args.json:
        for ident, name in names.items():
            print(f"[source {name}: /inputs/{ident}.txt]", file=sys.stderr)

    async def once() -> ExecutionResult:
        async with Engine(capacity=1, pool_size=1, limits=limits) as engine:
            return await engine.run(code, inputs=inputs, limits=limits, argv=_argv(args))

    result = anyio.run(once)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, ensure_ascii=False))
    else:
        _print_human(result)
    if result.outcome == "ok":
        return EXIT_OK
    if result.outcome == "python_error":
        return EXIT_PYTHON_ERROR
    if result.outcome == "invalid_input":
        return EXIT_INVALID
    return EXIT_OTHER

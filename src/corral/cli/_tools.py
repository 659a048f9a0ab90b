"""``corral tools`` and ``corral chat``: the registry's tools from a terminal.

One invocation per command: the local ``code_interpreter`` (with its own engine and sources)
plus, when ``MISTRAL_API_KEY`` is set, the Mistral-backed tools and connector loader.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator

import anyio

from corral._config import Config
from corral.cli._main import EXIT_INVALID, EXIT_OK, EXIT_PYTHON_ERROR
from corral.engine import Engine
from corral.mistral import (
    DEFAULT_CHAT_MODEL,
    MistralClient,
    MistralSettings,
    register_mistral_tools,
    run_chat,
)
from corral.tools import (
    Invocation,
    ToolContext,
    ToolRegistry,
    export_tools,
    register_code_interpreter,
)

__all__ = ["chat_command", "tools_command"]


@contextlib.asynccontextmanager
async def _toolbox(config: Config) -> AsyncIterator[tuple[ToolRegistry, ToolContext]]:
    registry = ToolRegistry()
    invocation = Invocation()
    async with Engine(capacity=1, pool_size=1, limits=config.limits()) as engine:
        register_code_interpreter(registry, engine, invocation)
        settings = MistralSettings.load(config.raw_toml, os.environ)
        async with MistralClient.from_settings(settings) as client:
            warn = lambda text: print(f"corral: {text}", file=sys.stderr)  # noqa: E731
            await register_mistral_tools(registry, settings, client, warn=warn)
            yield registry, ToolContext(invocation=invocation)


def tools_command(args: argparse.Namespace) -> int:
    config = Config.load(flags={"config": args.config})
    if args.tools_command == "list":
        return anyio.run(_list, config)
    try:
        arguments = json.loads(args.arguments)
    except ValueError as exc:
        print(f"corral tools call: the arguments are not JSON: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if not isinstance(arguments, dict):
        print("corral tools call: the arguments must be a JSON object", file=sys.stderr)
        return EXIT_INVALID
    return anyio.run(_call, config, args.name, arguments)


async def _list(config: Config) -> int:
    async with _toolbox(config) as (registry, _context):
        for tool in export_tools(registry.active(), "mcp"):
            summary = str(tool.get("description", "")).strip().splitlines()
            print(f"{tool['name']}\t{summary[0] if summary else ''}")
    return EXIT_OK


async def _call(config: Config, name: str, arguments: dict[str, object]) -> int:
    async with _toolbox(config) as (registry, context):
        result = await registry.call(name, arguments, context)
    print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    return EXIT_PYTHON_ERROR if result.is_error else EXIT_OK


def chat_command(args: argparse.Namespace) -> int:
    config = Config.load(flags={"config": args.config})
    return anyio.run(_chat, config, args.model)


def _read_line(prompt: str) -> str | None:
    try:
        return input(prompt)
    except EOFError:
        return None


async def _chat(config: Config, model: str | None) -> int:
    async with _toolbox(config) as (registry, context):
        settings = MistralSettings.load(config.raw_toml, os.environ)
        async with MistralClient.from_settings(settings) as client:
            if not client.has_key:
                print("corral chat: set MISTRAL_API_KEY first", file=sys.stderr)
                return EXIT_INVALID

            async def read(prompt: str) -> str | None:
                return await anyio.to_thread.run_sync(_read_line, prompt)

            await run_chat(
                registry,
                client,
                input_fn=read,
                output_fn=print,
                context=context,
                model=model or DEFAULT_CHAT_MODEL,
            )
    return EXIT_OK

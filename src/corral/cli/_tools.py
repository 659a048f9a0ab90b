"""``corral tools`` and ``corral chat``: the registry's tools from a terminal.

One invocation per command: the local ``code_interpreter`` (with its own engine and sources)
plus, when ``MISTRAL_API_KEY`` is set, the Mistral-backed tools and connector loader.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import AsyncIterator, Mapping

import anyio

from corral._config import Config
from corral.cli._exit import EXIT_INVALID, EXIT_OK, EXIT_PYTHON_ERROR
from corral.engine import Engine
from corral.mistral import (
    DEFAULT_CHAT_MODEL,
    MistralClient,
    MistralSettings,
    register_mistral_tools,
    run_chat,
)
from corral.tools import (
    CodeInterpreterConfig,
    Invocation,
    ToolContext,
    ToolRegistry,
    export_tools,
    register_code_interpreter,
)

__all__ = ["chat_command", "tools_command"]


_NO_KEY = "unavailable: set MISTRAL_API_KEY"


@dataclasses.dataclass(frozen=True, slots=True)
class _Toolbox:
    registry: ToolRegistry
    context: ToolContext
    unavailable: Mapping[str, str]
    """Tools that are registered but cannot work here, with the reason."""


@contextlib.asynccontextmanager
async def _toolbox(config: Config, *, run: bool = True) -> AsyncIterator[_Toolbox]:
    """The registry of one invocation; ``run=False`` for listing, which starts no engine."""
    registry = ToolRegistry()
    tool_config = CodeInterpreterConfig.from_toml(config.raw_toml)
    invocation = Invocation(max_calls=tool_config.max_calls)
    settings = MistralSettings.load(config.raw_toml, os.environ)
    engine = Engine(capacity=1, pool_size=1, limits=config.limits())
    async with engine if run else contextlib.nullcontext(engine):
        register_code_interpreter(registry, engine, invocation, config=tool_config)
        local = set(registry.names())
        async with MistralClient.from_settings(settings) as client:
            if client.has_key:
                warn = lambda text: print(f"corral: {text}", file=sys.stderr)  # noqa: E731
                await register_mistral_tools(registry, settings, client, warn=warn)
                unavailable: dict[str, str] = {}
            else:
                # Registered so a call explains itself (a config error), listed as unavailable;
                # the connector loader needs the key, so it is left out without a word.
                quiet = dataclasses.replace(settings, connector_tools_enabled=False)
                await register_mistral_tools(registry, quiet, client)
                unavailable = dict.fromkeys(set(registry.names()) - local, _NO_KEY)
            yield _Toolbox(registry, ToolContext(invocation=invocation), unavailable)


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
    async with _toolbox(config, run=False) as box:
        for tool in export_tools(box.registry.active(), "mcp"):
            name = str(tool["name"])
            summary = str(tool.get("description", "")).strip().splitlines()
            first = summary[0] if summary else ""
            if name in box.unavailable:
                first = f"({box.unavailable[name]}) {first}"
            print(f"{name}\t{first}")
    return EXIT_OK


async def _call(config: Config, name: str, arguments: dict[str, object]) -> int:
    async with _toolbox(config) as box:
        result = await box.registry.call(name, arguments, box.context)
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
    async with _toolbox(config) as box:
        registry, context = box.registry, box.context
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

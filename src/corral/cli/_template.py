"""``corral template``: build, list, show and remove templates in the data folder.

The command works on the data folder itself, whether or not a server runs: a build starts an
engine of its own (its steps run in a sandbox of it), and a running server sees the new
template at its next use. Templates built here are the operator's: every key may use them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from corral._config import Config
from corral.cli._exit import EXIT_INVALID, EXIT_OK, EXIT_PYTHON_ERROR
from corral.errors import TemplateBuildFailed, TemplateError, TemplateNotFound
from corral.templates import (
    OPERATOR,
    CopyFile,
    Env,
    Pip,
    Run,
    Step,
    TemplateSpec,
    TemplateStore,
    Workdir,
    check_name,
    home_path,
)

if TYPE_CHECKING:
    from corral.engine import LogLine

__all__ = ["spec_from_args", "template_command"]


def _copies(argument: str) -> list[CopyFile]:
    source, sep, dest = argument.rpartition(":")
    if not sep:
        source, dest = argument, ""
    src = Path(source).expanduser()
    if not src.exists():
        raise TemplateError(f"--copy {argument}: {source} does not exist")
    base = dest if dest and not dest.endswith("/") else (dest + src.name)
    base = home_path(base, f"--copy {argument}").rstrip("/")
    if src.is_file():
        return [CopyFile(base, src.read_bytes(), src.stat().st_mode & 0o777)]
    found = []
    for path in sorted(p for p in src.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(src).as_posix()
        found.append(CopyFile(f"{base}/{rel}", path.read_bytes(), path.stat().st_mode & 0o777))
    return found


def spec_from_args(args: argparse.Namespace) -> TemplateSpec:
    """The template the flags describe, its steps in this order: env, requirements, pip,
    copies, commands, then the working folder.

    Raises:
        TemplateError: a flag that cannot be used (a missing file, a bad K=V).
        OSError: a file could not be read.
    """
    steps: list[Step] = []
    pairs = []
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            raise TemplateError(f"--env {item}: K=V expected")
        pairs.append((name, value))
    if pairs:
        steps.append(Env(tuple(pairs)))
    for requirements in args.requirements:
        steps.append(Pip(requirements=Path(requirements).read_text()))
    if args.pip:
        steps.append(Pip(tuple(args.pip)))
    for argument in args.copy:
        steps.extend(_copies(argument))
    steps.extend(Run(command) for command in args.run)
    if args.workdir:
        steps.append(Workdir(args.workdir))
    return TemplateSpec(base=args.base, steps=tuple(steps), preload=tuple(args.preload))


def _print_line(line: LogLine) -> None:
    print(("! " if line.level == "error" else "  ") + line.message, file=sys.stderr, flush=True)


def _build(args: argparse.Namespace, config: Config, store: TemplateStore) -> int:
    import anyio

    from corral.engine import BuildLog, Engine, build_network, build_template
    from corral.http import engine_options

    name = check_name(args.name)
    spec = spec_from_args(args)
    store.check_owner(name, OPERATOR)
    options = {**engine_options(config.replace(mode="gateway")), "templates": store}
    options.update(capacity=1, pool_size=0, lean=False, preload=())

    async def build() -> None:
        async with Engine(**options) as engine:
            await build_template(
                engine, store, name, spec, owner=OPERATOR, log=BuildLog(on_line=_print_line),
                network=build_network(engine, engine.packages.index_host), seconds=args.timeout,
            )  # fmt: skip

    try:
        anyio.run(build)
    except TemplateBuildFailed as exc:
        print(f"corral template build: {exc}", file=sys.stderr)
        return EXIT_PYTHON_ERROR
    print(f"template {name} built")
    return EXIT_OK


def template_command(args: argparse.Namespace) -> int:
    config = Config.load(flags={"config": args.config})
    store = TemplateStore(config.data_dir)
    action = args.template_command
    try:
        if action == "build":
            return _build(args, config, store)
        if action == "list":
            found = store.list()
            if args.json:
                print(json.dumps([t.describe() for t in found], indent=2))
            for template in [] if args.json else found:
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(template.created_at))
                owner = template.owner or "operator"
                print(f"{template.name}\t{template.base}\t{owner}\t"
                      f"{template.layer_bytes} bytes\t{when}")  # fmt: skip
            return EXIT_OK
        if action == "show":
            print(json.dumps(store.get(args.name).describe(), indent=2))
            return EXIT_OK
        store.remove(args.name)
        print(f"template {args.name} removed")
        return EXIT_OK
    except TemplateNotFound as exc:
        print(f"corral template {action}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except (TemplateError, OSError) as exc:
        print(f"corral template {action}: {exc}", file=sys.stderr)
        return EXIT_INVALID

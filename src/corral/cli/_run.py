"""``corral run``: one fresh isolated run from a file, ``-c`` or standard input."""

from __future__ import annotations

import argparse
import base64
import binascii
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from corral._config import Config
from corral._mime import IMAGE_SUFFIXES, TEXT_PLAIN, is_textual
from corral._uids import DEFAULT_UID_RANGE, UidRange
from corral.cli._exit import EXIT_INVALID, EXIT_OK, EXIT_OTHER, EXIT_PYTHON_ERROR
from corral.engine import PYTHON_NAMES, Languages, language_for_path, stdlib_only
from corral.errors import (
    ConfigError,
    CorralError,
    LanguageUnavailable,
    NetworkPolicyError,
    SourceError,
)
from corral.sandbox import DEFAULT_PRELOAD, prelaunched
from corral.templates import TemplateStore

if TYPE_CHECKING:
    from corral.network import NetworkCeiling, SandboxNetwork

if TYPE_CHECKING:
    from corral.engine import ExecutionResult, Input, OutputEvent

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
    if not paths:
        return [], {}  # ingestion's readers (openpyxl, numpy) cost more than most runs
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


def _save_outputs(result: ExecutionResult, out_dir: Path) -> list[str]:
    """Write the run's files and display images into ``out_dir``; one note per item.

    File names come from the sandbox, so they are written through the confined helpers: a
    name that would leave ``out_dir`` or pass a link there is skipped, never followed.
    """
    from corral import _fs

    notes: list[str] = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for info in result.files:
        data = result.file_contents.get(info.path)
        if data is None:
            notes.append(f"[file: {info.path} ({info.size} bytes) not returned: over the bound]")
            continue
        try:
            _fs.write_atomic(out_dir, info.path, data)
        except (OSError, CorralError) as exc:
            notes.append(f"[file: {info.path} not written: {exc}]")
            continue
        notes.append(f"[file: {info.path} -> {out_dir / info.path} ({info.size} bytes)]")
    for number, bundle in enumerate(result.display, 1):
        kind = next((k for k in IMAGE_SUFFIXES if isinstance(bundle.get(k), str)), None)
        if kind is None:
            continue
        name = f"display-{number}{IMAGE_SUFFIXES[kind]}"
        text = str(bundle[kind])
        try:
            data = text.encode() if is_textual(kind) else base64.b64decode(text, validate=True)
            _fs.write_atomic(out_dir, name, data)
        except (binascii.Error, ValueError, OSError, CorralError) as exc:
            notes.append(f"[display {number}: {kind} not written: {exc}]")
            continue
        notes.append(f"[display {number}: {kind} -> {out_dir / name}]")
    return notes


def _print_live(event: OutputEvent) -> None:
    """Write stdout and stderr as the run produces them (displays are listed at the end)."""
    if event.kind not in ("stdout", "stderr"):
        return
    stream = sys.stdout if event.kind == "stdout" else sys.stderr
    try:
        stream.write(event.text)
        stream.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): the rest of the run's output goes nowhere, as a
        # script's would, and the run still ends with its own exit code.
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)


def _print_human(result: ExecutionResult, saved: list[str] | None, *, streamed: bool) -> None:
    if not streamed:
        sys.stdout.write(result.stdout)
    if result.result:
        text = result.result.get(TEXT_PLAIN, "")
        sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
    sys.stdout.flush()
    if not streamed:
        sys.stderr.write(result.stderr)
    written = {line.split(":", 1)[0] for line in saved or ()}
    for number, entry in enumerate(result.display, 1):
        text = entry.get(TEXT_PLAIN)
        if isinstance(text, str) and text and not any(k in IMAGE_SUFFIXES for k in entry):
            sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
        elif f"[display {number}" not in written:
            kinds = ", ".join(sorted(k for k in entry if k != TEXT_PLAIN))
            hint = "; --out-dir DIR saves it" if saved is None else ""
            sys.stderr.write(f"[display {number}: {kinds or TEXT_PLAIN}{hint}]\n")
    if saved is None:
        for info in result.files:
            sys.stderr.write(f"[file: {info.path} ({info.size} bytes); --out-dir DIR saves it]\n")
    for line in saved or ():
        sys.stderr.write(line + "\n")
    for channel, count in result.omitted.items():
        if count:
            sys.stderr.write(f"[{channel}: {count} characters omitted]\n")
    if result.outcome not in ("ok", "python_error") and not result.stderr.rstrip().endswith(
        result.message
    ):
        sys.stderr.write(f"[{result.outcome}] {result.message}\n")


def _network(config: Config, asked: list[str]) -> tuple[NetworkCeiling, SandboxNetwork] | None:
    """The ceiling and the run's policy ``--network`` asks for (None: no network).

    On the command line its user is the operator: without a ``[network] allow`` in
    ``corral.toml``, what ``--network`` names is the ceiling too (``deny``, ``hosts`` and
    ``private_allow`` still apply). With one, ``--network`` must stay inside it.

    Raises:
        ConfigError, NetworkPolicyError: a bad entry, or one beyond ``[network] allow``.
    """
    if not asked:
        return None
    ceiling = config.network_ceiling()
    if not ceiling.enabled:
        ceiling = config.replace(allow=tuple(asked)).network_ceiling()
    return ceiling, ceiling.subset(asked)


def _language(args: argparse.Namespace) -> str:
    """``--language``, else what FILE's suffix names, else python."""
    if args.language:
        return str(args.language)
    if args.code is None and args.file not in (None, "-"):
        return language_for_path(args.file) or "python"
    return "python"


def run_command(args: argparse.Namespace) -> int:
    try:
        code = _read_code(args)
        inputs, names = _inputs(args.source)
    except (OSError, UnicodeDecodeError, ValueError, SourceError) as exc:
        print(f"corral run: {exc}", file=sys.stderr)
        return EXIT_INVALID
    config = Config.load(flags={"config": args.config})
    language = _language(args)
    # Python needs no toolchain: its zygote binds none (and so is the one started ahead).
    languages = Languages.none("corral run of Python uses none")
    if language not in PYTHON_NAMES:
        languages = config.languages()
        try:
            languages.get(language)
        except LanguageUnavailable as exc:
            print(f"corral run: {exc}", file=sys.stderr)
            return EXIT_INVALID
    limits = config.limits()
    if args.timeout is not None:
        if not args.timeout > 0:
            print("corral run: --timeout must be positive", file=sys.stderr)
            return EXIT_INVALID
        limits = limits.replace(timeout=args.timeout)
    if names and not args.json:
        for ident, name in names.items():
            print(f"[source {name}: /inputs/{ident}.txt]", file=sys.stderr)
    try:
        network = _network(config, args.network)
    except (ConfigError, NetworkPolicyError) as exc:
        print(f"corral run: --network: {exc}", file=sys.stderr)
        return EXIT_INVALID

    # One run, one zygote: code that imports only the standard library needs none of the
    # preloaded packages (whose import is most of an engine's start), other code no lean one.
    template = args.template or ""
    if template and TemplateStore(config.data_dir).find(template) is None:
        print(f"corral run: template {template!r} not found", file=sys.stderr)
        return EXIT_INVALID
    # With a template, the run's zygote is the template's: the default one preloads nothing.
    python = language in PYTHON_NAMES
    preload = () if not python or stdlib_only(code) or template else DEFAULT_PRELOAD
    uids = UidRange(*config.uid_range) if config.uid_range else DEFAULT_UID_RANGE

    # The zygote starts first, on another CPU, while this process imports anyio and the
    # engine; the engine adopts it (the full zygote's share of the uids, as Engine splits them).
    packages = config.package_sources()
    # The toolchains' folders, as the engine binds them, or it would not adopt this zygote.
    files = dataclasses.replace(packages.sandbox_files(), toolchains=languages.binds())
    with prelaunched(preload=preload, uids=uids.split()[0], prewarm=False, files=files):
        import anyio

        from corral.engine import Engine
        from corral.network import NO_NETWORK, Egress

        async def once() -> ExecutionResult:
            # Nothing for a second run: the probe's worker serves this one, no spare is made,
            # and the zygote warms nothing up for workers that will never exist.
            engine = Engine(
                capacity=1,
                pool_size=0,
                prewarm=False,
                lean=False,
                preload=preload,
                uid_range=uids,
                limits=limits,
                egress=None if network is None else Egress(network[0]),
                packages=packages,
                languages=languages,
                templates=TemplateStore(config.data_dir),
            )
            async with engine:
                # Live output for a person at a terminal; --json prints one document at the end.
                listener = None if args.json else _print_live
                return await engine.run(
                    code,
                    inputs=inputs,
                    limits=limits,
                    argv=_argv(args),
                    on_output=listener,
                    network=NO_NETWORK if network is None else network[1],
                    language=language,
                    template=template,
                )

        result = anyio.run(once)
    saved = None
    if args.out_dir is not None:
        try:
            saved = _save_outputs(result, Path(args.out_dir))
        except OSError as exc:
            print(f"corral run: cannot write to {args.out_dir}: {exc.strerror}", file=sys.stderr)
            return EXIT_INVALID
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, ensure_ascii=False))
        for line in saved or ():
            print(line, file=sys.stderr)
    else:
        # A program that never ran (its compile failed) streamed nothing: its compiler's
        # messages are the result's own.
        ran = result.compile is None or result.compile.return_code == 0
        _print_human(result, saved, streamed=ran)
    if result.outcome == "ok":
        return EXIT_OK
    if result.outcome == "python_error":
        return EXIT_PYTHON_ERROR
    if result.outcome == "invalid_input":
        return EXIT_INVALID
    return EXIT_OTHER

"""``corral batch IN.jsonl [-o OUT.jsonl] [--concurrency N] [--ray auto|ADDRESS] [--resume]``.

One fresh isolated run per input line; one output line per input line, in input order, each
written and flushed as soon as it and every line before it are done, so a crash loses no
finished line. ``--resume`` keeps OUT's complete lines and skips their ids.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from corral.cli._exit import EXIT_INVALID, EXIT_OK

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["add_batch_parser", "batch_command", "finished_ids"]


def add_batch_parser(commands: Any) -> None:
    batch = commands.add_parser(
        "batch", help="one fresh isolated run per JSONL line, results in input order"
    )
    batch.add_argument("input", metavar="IN.jsonl", help='lines {"id", "code", "stdin"?, ...}')
    batch.add_argument("-o", "--output", metavar="OUT.jsonl", help="default standard output")
    batch.add_argument("--concurrency", type=int, metavar="N", help="runs at once per engine")
    batch.add_argument(
        "--ray", metavar="auto|ADDRESS", help="spread over a Ray cluster, one engine per node"
    )
    batch.add_argument(
        "--resume", action="store_true", help="keep OUT's finished lines and skip their ids"
    )


def finished_ids(path: Path) -> set[Any]:
    """Ids of OUT's complete lines; a torn last line (a crash mid-write) is cut off.

    A line that was not JSON has no id: its record's ``line`` number stands in for one.
    """
    done: set[Any] = set()
    with path.open("r+b") as out:
        keep = 0
        for line in out:
            if not line.endswith(b"\n"):
                break
            try:
                record = json.loads(line)
            except ValueError:
                break
            if isinstance(record, dict):
                ident = record.get("id")
                done.add(_key(ident) if ident is not None else ("line", record.get("line")))
            keep += len(line)
        out.truncate(keep)
    return done


def _key(ident: Any) -> Any:
    # JSON's 1 and "1" are different ids; keep them apart in one set.
    return (type(ident).__name__, ident)


def _count_lines(path: Path) -> int:
    with path.open("rb") as source:
        return sum(1 for line in source if line.strip())


def batch_command(args: argparse.Namespace) -> int:
    source = Path(args.input)
    if not source.is_file():
        print(f"corral: {source}: no such file", file=sys.stderr)
        return EXIT_INVALID
    if args.concurrency is not None and args.concurrency < 1:
        print("corral: --concurrency must be at least 1", file=sys.stderr)
        return EXIT_INVALID
    if args.resume and not args.output:
        print("corral: --resume needs -o OUT.jsonl", file=sys.stderr)
        return EXIT_INVALID
    target = Path(args.output) if args.output else None
    done = finished_ids(target) if args.resume and target and target.exists() else set()
    from corral.batch import read_jsonl, run_batch

    total = _count_lines(source)
    with contextlib.ExitStack() as stack:
        lines = stack.enter_context(source.open(encoding="utf-8", errors="surrogateescape"))
        out: IO[str] = (
            stack.enter_context(target.open("a" if args.resume else "w", encoding="utf-8"))
            if target
            else sys.stdout
        )
        todo = _skipping(read_jsonl(lines), done)
        records = run_batch(todo, concurrency=args.concurrency, ray_address=args.ray)
        progress = _progress(total, len(done))
        with progress:
            task = progress.add_task("corral batch", total=total, completed=len(done))
            for record in records:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                out.flush()
                progress.advance(task)
    return EXIT_OK


def _skipping(entries: Iterator[Any], done: set[Any]) -> Iterator[Any]:
    from corral.batch import Unreadable

    for entry in entries:
        if done and isinstance(entry, dict) and _key(entry.get("id")) in done:
            continue
        if done and isinstance(entry, Unreadable) and ("line", entry.line) in done:
            continue
        yield entry


def _progress(total: int, completed: int) -> Progress:
    """A bar with rate and ETA on stderr, drawn only when stderr is a terminal."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        Task,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class _Rate(ProgressColumn):
        """Runs per second over rich's recent window."""

        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("-- runs/s" if speed is None else f"{speed:.0f} runs/s", style="cyan")

    console = Console(file=sys.stderr)
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        _Rate(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not console.is_terminal,
        transient=False,
    )

"""The top-level ``corral.Engine``: the engine with ``corral.sources`` ingestion wired in.

The engine sits below the sources layer (docs/design.md §1), so ``corral.engine.Engine`` mounts
only ready-made ``Input`` objects. Above both, this subclass turns ``run(sources=...)`` paths
and bytes into inputs with the same ingestion the CLI and the tools use.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from corral import engine as _engine
from corral.sources import SourceRegistry

__all__ = ["Engine", "source_inputs"]


def _read(item: _engine.SourceItem, index: int) -> tuple[bytes, str]:
    if isinstance(item, tuple):
        name, data = item
        return bytes(data), name
    if isinstance(item, bytes | bytearray | memoryview):
        # Ingestion goes by extension: UTF-8 bytes are text, anything else a binary file.
        try:
            bytes(item).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(item), f"source{index}.bin"
        return bytes(item), f"source{index}.txt"
    path = Path(os.fspath(item))
    return path.read_bytes(), path.name


def source_inputs(sources: Sequence[_engine.SourceItem]) -> list[_engine.Input]:
    """Ingest paths, bytes or ``(name, bytes)`` pairs into inputs, each under its base name.

    Blocking (reads files): call it from a worker thread in async code.

    Raises:
        OSError: a path could not be read.
        SourceError: a source is not ingestible or too large.
        ValueError: a name is not a plain file name.
    """
    registry = SourceRegistry()
    inputs: list[_engine.Input] = []
    for index, item in enumerate(sources, 1):
        data, name = _read(item, index)
        source = registry.add_attachment(data, name)
        inputs.append(dataclasses.replace(registry.to_input(source), name=name))
    return inputs


class Engine(_engine.Engine):
    """Runs untrusted Python in fresh, isolated workers (see :class:`corral.engine.Engine`).

    ``run(code, sources=[path_or_bytes, ...])`` ingests each source with ``corral.sources``
    and mounts it under ``/inputs`` and under its base name in the working folder.
    """

    def _ingest(self, sources: Sequence[_engine.SourceItem]) -> list[_engine.Input]:
        return source_inputs(sources)

"""The bounds of one execution, resolved once and passed down as data."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_LIMITS", "Limits"]

_MIB = 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """Bounds for one execution; no field accepts "unlimited".

    Every field is validated on construction, so no layer below re-checks.
    """

    timeout: float = 30.0
    """Seconds for queue + start + run together; there is no unlimited.

    The one default timeout (``timeoutMs 30000``, docs/design.md §4): the Python API, the CLI, the
    server (``[engine] timeout``, ``CORRAL_TIMEOUT``), the tools and MCP all start from it; a
    request's own ``timeout`` may lower it, never raise it past the server's."""
    code_chars: int = 20_000
    """Longest accepted source, in characters."""
    output_chars: int = 64_000
    """Per channel (stdout, stderr, result); what fitting cuts is counted in ``omitted``."""
    output_bytes: int = 192_000
    """Aggregate UTF-8 bytes of stdout + stderr + result after the per-channel ceilings."""
    memory_bytes: int = 1024 * _MIB
    """Memory a run may use on top of the preloaded runtime: each process's address space,
    and, where cgroups are in force, the sum of all its processes and the kernel memory they
    cause (docs/cgroups.md)."""
    pids: int = 64
    """Processes and threads the worker may hold at once."""
    work_bytes: int = 128 * _MIB
    """Size of the writable ``/work`` (and ``/tmp``) file system."""
    file_bytes: int = 64 * _MIB
    """Largest single file the code may write."""
    open_files: int = 256
    """Open file descriptors per process."""
    max_files: int = 32
    """Files reported back from ``/work``; later ones are counted, not returned."""
    max_file_bytes: int = 16 * _MIB
    """Total bytes of ``/work`` files whose content is returned to the caller."""
    max_display: int = 16
    """Display entries (figures, rich outputs) kept per run."""
    display_bytes: int = 8 * _MIB
    """Total bytes of display bundles kept per run."""
    max_sources: int = 4
    """Distinct inputs one run may mount."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"Limits.{field.name} must be a number, not {value!r}")
            if not value > 0 or value != value or value == float("inf"):
                raise ValueError(f"Limits.{field.name} must be positive and finite, not {value!r}")
            if field.name != "timeout" and not isinstance(value, int):
                raise TypeError(f"Limits.{field.name} must be an integer, not {value!r}")

    def replace(self, **changes: Any) -> Limits:
        """Return a copy with some fields changed (and validated)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, float | int]:
        """The limits as plain JSON-ready data, for evidence records."""
        return dict(_as_dict(self))


@functools.lru_cache(maxsize=64)
def _as_dict(limits: Limits) -> tuple[tuple[str, float | int], ...]:
    # Every run records its limits; dataclasses.asdict is slow enough to show per run.
    return tuple((field.name, getattr(limits, field.name)) for field in dataclasses.fields(limits))


DEFAULT_LIMITS = Limits()

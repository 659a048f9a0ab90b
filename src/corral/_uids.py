"""The host uids the sandbox runs as: a configurable block, one uid per live worker.

A value object like :class:`~corral.Limits`: the configuration checks it, the engine passes
it down, the zygote hands its uids out.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_UID_RANGE", "UidRange"]


@dataclass(frozen=True, slots=True)
class UidRange:
    """A block of host uids (and the gids of the same numbers) the sandbox may use.

    Every live worker or session gets one of its own, so RLIMIT_NPROC, ``/proc/<pid>``
    permissions and ptrace never reach from one tenant to another; a zygote takes the
    first of its block. Never a system uid and never 65534 (``nobody``, which other
    processes on the host run as).
    """

    first: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 2:
            raise ValueError(f"uid_range needs at least 2 uids, not {self.count}")
        if self.first < _MIN_SANDBOX_UID:
            raise ValueError(f"uid_range must start at {_MIN_SANDBOX_UID} or above")
        if self.first + self.count > _MAX_UID:
            raise ValueError(f"uid_range must end below {_MAX_UID}")
        if self.first <= _NOBODY < self.first + self.count:
            raise ValueError("uid_range must not hold 65534 (nobody)")

    def split(self) -> tuple[UidRange, UidRange]:
        """Two disjoint halves (one per zygote)."""
        half = self.count // 2
        return UidRange(self.first, half), UidRange(self.first + half, self.count - half)


_MIN_SANDBOX_UID = 100_000  # above every system and login uid
_MAX_UID = 2**32 - 1  # (uid_t)-1 means "no uid"
_NOBODY = 65534
DEFAULT_UID_RANGE = UidRange(1_879_048_192, 65_536)
"""Right above the range systemd leaves to containers (524288-1879048191)."""

"""Host-wide leases on blocks of sandbox uids, so two corral servers never share one.

Every live worker or session runs as a host uid of its own, which keeps RLIMIT_NPROC,
``/proc/<pid>`` permissions and ptrace per tenant. That promise spans the host, not one
process: two servers (or a server and ``corral run``) started with the same ``uid_range``
would hand the same uids to different tenants, and one tenant's fork bomb would count against
another's process budget. So a zygote takes its uids from a lease: one block of
:data:`UID_LEASE` uids of its range, held by an exclusive ``flock`` on a file named after the
block in corral's root-owned, 0700 runtime directory. The locked descriptor is handed to the
zygote itself and closed everywhere else, so the lease lasts exactly as long as the zygote
(whose workers die with it) and the kernel drops it however the zygote ends.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass

from corral._uids import UidRange
from corral.errors import IsolationError
from corral.sandbox.host._runtime import private_dir, runtime_dir

__all__ = ["UID_LEASE", "UidLease", "lease_uids"]

UID_LEASE = 1024
"""Uids per lease: a zygote's own and one per live worker or session it serves at once. The
default range gives each of its two zygotes 32 leases: 32 engines (servers, `corral run`s,
test runs) at once on one host."""

_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_LOCK_MODE = 0o600


@dataclass(frozen=True, slots=True)
class UidLease:
    uids: UidRange
    """The block this lease holds."""
    fd: int
    """The locked descriptor: the lease lasts while any process keeps it open."""


def lease_uids(uids: UidRange) -> UidLease:
    """Lock the first block of ``uids`` no other live zygote on this host holds.

    A range smaller than two leases is one block. Blocking file I/O: call it off the loop.

    Raises:
        IsolationError: every block is held, or the runtime directory is not corral's alone.
    """
    folder = private_dir(runtime_dir(), "uids")
    size = uids.count if uids.count < 2 * UID_LEASE else UID_LEASE
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for first in range(uids.first, uids.first + uids.count - size + 1, size):
            fd = os.open(str(first), _LOCK_FLAGS, _LOCK_MODE, dir_fd=dir_fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            return UidLease(UidRange(first, size), fd)
    finally:
        os.close(dir_fd)
    raise IsolationError(
        f"every block of uid_range {uids.first}:{uids.count} is in use by another corral "
        f"on this host: give each server a uid_range of its own"
    )

"""The process settings every case of a case server starts with: its server's, as prepared.

A case runs as its server's uid, so the kernel lets it change, on pid 1, whatever a process
may change on another of its own uid: ``prlimit`` lowers the server's limits (``NOFILE
(12, 12)``, ``FSIZE (10, 10)``), ``setpriority`` raises its nice value, ``sched_setscheduler``
and ``sched_setattr`` give it ``SCHED_IDLE`` or ``SCHED_BATCH``, reset-on-fork, a custom time
slice or utilisation clamps, ``sched_setaffinity`` pins it to one CPU. Every later case would
inherit that by fork, a channel from one case to the next. So:

* the server takes a ``Pristine`` copy of its own settings once its program is prepared
  (``capture``): every rlimit, its whole ``sched_getattr`` state and its CPU affinity;
* after each case, once every process of it is gone and before the next fork, the server
  compares its settings with that copy (``changed``) and, if anything differs, answers unclean
  and exits, so the engine replaces it: an unprivileged process cannot put them all back (it
  may not lower its nice value, nor raise a hard limit);
* each case's child sets every rlimit, its scheduling policy and priority, nice value and
  affinity from the copy before user code (``apply``), then lowers its limits for the case.

Out of a case's reach already: ``ioprio_set`` (the seccomp policy refuses it), pid 1's
``/proc`` files such as ``oom_score_adj``, ``timerslack_ns`` and ``autogroup`` (root's while
the server is non-dumpable), its memory policy (``migrate_pages`` is refused), tracing and
signals. The nice value of a scheduler autogroup, which any member may raise through
``/proc/self/autogroup``, is the case's own: each case starts a session (and so an autogroup)
of its own, as each worker does.

The alternative, a uid of its own for each case so that it could not touch pid 1 at all, does
not fit the worker: its user namespace maps exactly one uid (1000 inside, the worker's own
host uid outside) and it holds no ``CAP_SETUID`` once locked down, which it is before it hears
it will serve cases. A case uid would take a second host uid per worker (half as many live
workers per uid block), a server that keeps ``CAP_SETUID`` through the pool and every case,
and ``CAP_DAC_OVERRIDE``/``CAP_FOWNER`` to wipe a case's 0700 folders, and cases whose uid and
file owners differ from a fresh run's. That is privilege in the very process every case is
forked from; checking and resetting costs a few dozen system calls per case and none.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

from corral.sandbox import _syscalls as sc

__all__ = ["Pristine", "apply", "capture", "changed", "forbid_message_queues"]

_RLIMITS = tuple(sorted({getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")}))
_POLICY, _FLAGS, _NICE, _PRIORITY = range(4)
"""Fields of ``sc.sched_getattr()``'s answer."""
_SCHED_FLAG_RESET_ON_FORK = 1


@dataclass(frozen=True, slots=True)
class Pristine:
    """A process's own settings that its forks inherit."""

    rlimits: tuple[tuple[int, int], ...]
    """(soft, hard) per resource, in ``_RLIMITS`` order."""
    scheduler: tuple[int, ...]
    affinity: frozenset[int]


def capture() -> Pristine:
    """This process's settings now."""
    return Pristine(
        rlimits=tuple(resource.getrlimit(which) for which in _RLIMITS),
        scheduler=sc.sched_getattr(),
        affinity=frozenset(os.sched_getaffinity(0)),
    )


def changed(pristine: Pristine) -> bool:
    """Whether this process's settings differ from ``pristine``."""
    return capture() != pristine


def apply(pristine: Pristine) -> None:
    """Set every rlimit, the scheduling policy, nice value and affinity from ``pristine``.

    Raises:
        OSError, ValueError: one cannot be set back (a hard limit or a nice value that only
            a privileged process could restore).
    """
    for which, limits in zip(_RLIMITS, pristine.rlimits, strict=True):
        resource.setrlimit(which, limits)
    scheduler = pristine.scheduler
    policy = scheduler[_POLICY]
    if scheduler[_FLAGS] & _SCHED_FLAG_RESET_ON_FORK:
        policy |= os.SCHED_RESET_ON_FORK
    os.sched_setscheduler(0, policy, os.sched_param(scheduler[_PRIORITY]))
    os.setpriority(os.PRIO_PROCESS, 0, scheduler[_NICE])
    os.sched_setaffinity(0, pristine.affinity)


def forbid_message_queues() -> None:
    """No POSIX message queue for a case: one cannot be listed without mounting ``mqueue``,
    so none could be removed after its case."""
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))

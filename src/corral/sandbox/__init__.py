"""Isolation and workers: the zygote, the warm pool, the in-sandbox runner and its protocol.

Above: corral.engine, which schedules runs, applies deadlines and fits output. Below: the
Linux kernel (namespaces, seccomp, rlimits) and CPython. Knows nothing of sessions, deadlines,
outcomes or wire formats: it starts workers, passes one request to each and reports what
came back.
"""

from corral._public import publish as _publish
from corral.sandbox._doctor import DoctorReport, Feature, doctor
from corral.sandbox._holder_client import Holder
from corral.sandbox._host import DEFAULT_PRELOAD, DEFAULT_UID_RANGE, UidRange, ZygoteHost
from corral.sandbox._pool import PoolStatistics, WarmPool
from corral.sandbox._seccomp import DENIED_SYSCALLS, SECCOMP_POLICY, SeccompPolicy, SyscallGroup
from corral.sandbox._syscalls import as_fs_owner
from corral.sandbox._worker import OutputSink, Worker, WorkerReport

__all__ = [
    "DEFAULT_PRELOAD",
    "DEFAULT_UID_RANGE",
    "DENIED_SYSCALLS",
    "SECCOMP_POLICY",
    "DoctorReport",
    "Feature",
    "Holder",
    "OutputSink",
    "PoolStatistics",
    "SeccompPolicy",
    "SyscallGroup",
    "UidRange",
    "WarmPool",
    "Worker",
    "WorkerReport",
    "ZygoteHost",
    "as_fs_owner",
    "doctor",
]

_publish(globals())

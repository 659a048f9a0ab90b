"""Isolation and workers: the zygote, the warm pool, the in-sandbox runner and its protocol.

Above: corral.engine, which schedules runs, applies deadlines and fits output. Below: the
Linux kernel (namespaces, seccomp, rlimits) and CPython. Knows nothing of sessions, deadlines,
outcomes or wire formats: it starts workers, passes one request to each and reports what
came back.
"""

from corral._public import publish as _publish
from corral.sandbox._doctor import DoctorReport, Feature, doctor
from corral.sandbox._holder_client import Holder
from corral.sandbox._host import DEFAULT_PRELOAD, ZygoteHost
from corral.sandbox._pool import PoolStatistics, WarmPool
from corral.sandbox._protocol import (
    MAX_REPORTED_PATH,
    Done,
    ErrorReport,
    FileReport,
    FittedText,
    InputSpec,
    RunLimits,
    RunRequest,
    Usage,
)
from corral.sandbox._rootfs import OUTER_ID
from corral.sandbox._seccomp import DENIED_SYSCALLS
from corral.sandbox._syscalls import as_fs_owner
from corral.sandbox._worker import OutputSink, Worker, WorkerReport

__all__ = [
    "DEFAULT_PRELOAD",
    "DENIED_SYSCALLS",
    "MAX_REPORTED_PATH",
    "OUTER_ID",
    "DoctorReport",
    "Done",
    "ErrorReport",
    "Feature",
    "FileReport",
    "FittedText",
    "Holder",
    "InputSpec",
    "OutputSink",
    "PoolStatistics",
    "RunLimits",
    "RunRequest",
    "Usage",
    "WarmPool",
    "Worker",
    "WorkerReport",
    "ZygoteHost",
    "as_fs_owner",
    "doctor",
]

_publish(globals())

"""Isolation and workers: the zygote, the warm pool, the in-sandbox runner and its protocol.

Above: corral.engine, which schedules runs, applies deadlines and fits output. Below: the
Linux kernel (namespaces, seccomp, rlimits) and CPython. Knows nothing of sessions, deadlines,
outcomes or wire formats: it starts workers, passes one request to each and reports what
came back.

The tree shows the boundary: ``inside/`` is the code that runs in the sandbox (the zygote, its
workers and session holders), ``host/`` the engine-side handles on them (zygote, worker,
holder, pool, doctor), and ``_protocol`` / ``_seqpacket`` / ``_syscalls`` the boundary both
sides share.
"""

from corral._public import publish as _publish
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
from corral.sandbox._syscalls import as_fs_owner
from corral.sandbox.host._cases import CaseServer
from corral.sandbox.host._command import Command
from corral.sandbox.host._doctor import DoctorReport, Feature, doctor
from corral.sandbox.host._holder import Holder
from corral.sandbox.host._pool import PoolStatistics, WarmPool
from corral.sandbox.host._worker import OutputSink, Worker, WorkerReport
from corral.sandbox.host._zygote import DEFAULT_PRELOAD, Zygote
from corral.sandbox.inside._seccomp import (
    DENIED_SYSCALLS,
    SECCOMP_POLICY,
    SeccompPolicy,
    SyscallGroup,
)

__all__ = [
    "DEFAULT_PRELOAD",
    "DENIED_SYSCALLS",
    "MAX_REPORTED_PATH",
    "SECCOMP_POLICY",
    "CaseServer",
    "Command",
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
    "SeccompPolicy",
    "SyscallGroup",
    "Usage",
    "WarmPool",
    "Worker",
    "WorkerReport",
    "Zygote",
    "as_fs_owner",
    "doctor",
]

_publish(globals())

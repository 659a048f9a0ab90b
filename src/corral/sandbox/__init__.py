"""Isolation and workers: the zygote, the warm pool, the in-sandbox runner and its protocol.

Above: corral.engine, which schedules runs, applies deadlines and fits output. Below: the
Linux kernel (namespaces, seccomp, rlimits) and CPython. Knows nothing of sessions, deadlines,
outcomes or wire formats: it starts workers, passes one request to each and reports what
came back.

The tree shows the boundary: ``inside/`` is the code that runs in the sandbox (the zygote, its
workers and session holders), ``host/`` the engine-side handles on them (zygote, worker,
holder, pool, doctor), and ``_protocol`` / ``_seqpacket`` / ``_syscalls`` the boundary both
sides share.

Each name is imported on first use: the zygote and its workers import the boundary and
``inside/`` modules through this package, and must not pay for (or carry in every forked
heap) the host side's anyio handles.
"""

import typing

from corral import _public

if typing.TYPE_CHECKING:
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
    from corral.sandbox.host._launch import DEFAULT_PRELOAD, prelaunched
    from corral.sandbox.host._pool import PoolStatistics, WarmPool
    from corral.sandbox.host._worker import OutputSink, Worker, WorkerReport
    from corral.sandbox.host._zygote import Zygote
    from corral.sandbox.inside._seccomp import (
        DENIED_SYSCALLS,
        SECCOMP_POLICY,
        SeccompPolicy,
        SyscallGroup,
    )

_EXPORTS = {
    "DEFAULT_PRELOAD": "corral.sandbox.host._launch",
    "DENIED_SYSCALLS": "corral.sandbox.inside._seccomp",
    "MAX_REPORTED_PATH": "corral.sandbox._protocol",
    "SECCOMP_POLICY": "corral.sandbox.inside._seccomp",
    "CaseServer": "corral.sandbox.host._cases",
    "Command": "corral.sandbox.host._command",
    "DoctorReport": "corral.sandbox.host._doctor",
    "Done": "corral.sandbox._protocol",
    "ErrorReport": "corral.sandbox._protocol",
    "Feature": "corral.sandbox.host._doctor",
    "FileReport": "corral.sandbox._protocol",
    "FittedText": "corral.sandbox._protocol",
    "Holder": "corral.sandbox.host._holder",
    "InputSpec": "corral.sandbox._protocol",
    "OutputSink": "corral.sandbox.host._worker",
    "PoolStatistics": "corral.sandbox.host._pool",
    "RunLimits": "corral.sandbox._protocol",
    "RunRequest": "corral.sandbox._protocol",
    "SeccompPolicy": "corral.sandbox.inside._seccomp",
    "SyscallGroup": "corral.sandbox.inside._seccomp",
    "Usage": "corral.sandbox._protocol",
    "WarmPool": "corral.sandbox.host._pool",
    "Worker": "corral.sandbox.host._worker",
    "WorkerReport": "corral.sandbox.host._worker",
    "Zygote": "corral.sandbox.host._zygote",
    "as_fs_owner": "corral.sandbox._syscalls",
    "doctor": "corral.sandbox.host._doctor",
    "prelaunched": "corral.sandbox.host._launch",
}

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
    "prelaunched",
]

if not typing.TYPE_CHECKING:  # mypy reads the imports above
    __getattr__, __dir__ = _public.lazy_exports(globals(), _EXPORTS)

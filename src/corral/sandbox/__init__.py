"""Isolation and workers: the zygote, the warm pool, the in-sandbox runner and its protocol.

Above: corral.engine, which schedules runs, applies deadlines and fits output. Below: the
Linux kernel (namespaces, seccomp, rlimits) and CPython. Knows nothing of sessions, deadlines,
outcomes or wire formats: it starts workers, passes one request to each and reports what
came back.

The tree shows the boundary: ``inside/`` is the code that runs in the sandbox (the zygote, its
workers and session holders), ``host/`` the engine-side handles on them (zygote, worker,
holder, pool, doctor), and ``_protocol``, ``_control_protocol``, ``_case_protocol``,
``_seqpacket``, ``_descriptors`` and ``_syscalls`` (with ``corral._mime``) the boundary both
sides share; ``_twin`` is the in-process stand-in for all of it (docs/architecture.md).

Each name is imported on first use: the zygote and its workers import the boundary and
``inside/`` modules through this package, and must not pay for (or carry in every forked
heap) the host side's anyio handles.
"""

import typing

from corral import _public

if typing.TYPE_CHECKING:
    from corral.sandbox._case_protocol import HEAP_MB, Launch
    from corral.sandbox._control_protocol import (
        MAX_INTERPRETERS,
        TEMPLATE_LAYER,
        WHEELHOUSE,
        SandboxFiles,
        StaticLimits,
    )
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
    from corral.sandbox._twin import InProcessBackend
    from corral.sandbox._twin_cell import Handler, TwinIO, TwinReply, run_in_process
    from corral.sandbox.host._backend import (
        HolderLike,
        IsolatedBackend,
        SandboxBackend,
        ZygoteLike,
    )
    from corral.sandbox.host._cases import CaseServer
    from corral.sandbox.host._cgroups import CgroupTree, SandboxCgroup, key_group
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
    "HEAP_MB": "corral.sandbox._case_protocol",
    "DENIED_SYSCALLS": "corral.sandbox.inside._seccomp",
    "MAX_INTERPRETERS": "corral.sandbox._control_protocol",
    "MAX_REPORTED_PATH": "corral.sandbox._protocol",
    "SECCOMP_POLICY": "corral.sandbox.inside._seccomp",
    "CaseServer": "corral.sandbox.host._cases",
    "CgroupTree": "corral.sandbox.host._cgroups",
    "Command": "corral.sandbox.host._command",
    "DoctorReport": "corral.sandbox.host._doctor",
    "Done": "corral.sandbox._protocol",
    "ErrorReport": "corral.sandbox._protocol",
    "Feature": "corral.sandbox.host._doctor",
    "Launch": "corral.sandbox._case_protocol",
    "FileReport": "corral.sandbox._protocol",
    "FittedText": "corral.sandbox._protocol",
    "Handler": "corral.sandbox._twin_cell",
    "Holder": "corral.sandbox.host._holder",
    "HolderLike": "corral.sandbox.host._backend",
    "IsolatedBackend": "corral.sandbox.host._backend",
    "InProcessBackend": "corral.sandbox._twin",
    "InputSpec": "corral.sandbox._protocol",
    "OutputSink": "corral.sandbox.host._worker",
    "PoolStatistics": "corral.sandbox.host._pool",
    "RunLimits": "corral.sandbox._protocol",
    "RunRequest": "corral.sandbox._protocol",
    "SandboxBackend": "corral.sandbox.host._backend",
    "SandboxCgroup": "corral.sandbox.host._cgroups",
    "SandboxFiles": "corral.sandbox._control_protocol",
    "WHEELHOUSE": "corral.sandbox._control_protocol",
    "TEMPLATE_LAYER": "corral.sandbox._control_protocol",
    "SeccompPolicy": "corral.sandbox.inside._seccomp",
    "StaticLimits": "corral.sandbox._control_protocol",
    "SyscallGroup": "corral.sandbox.inside._seccomp",
    "TwinIO": "corral.sandbox._twin_cell",
    "TwinReply": "corral.sandbox._twin_cell",
    "Usage": "corral.sandbox._protocol",
    "WarmPool": "corral.sandbox.host._pool",
    "Worker": "corral.sandbox.host._worker",
    "WorkerReport": "corral.sandbox.host._worker",
    "Zygote": "corral.sandbox.host._zygote",
    "ZygoteLike": "corral.sandbox.host._backend",
    "as_fs_owner": "corral.sandbox._syscalls",
    "doctor": "corral.sandbox.host._doctor",
    "key_group": "corral.sandbox.host._cgroups",
    "prelaunched": "corral.sandbox.host._launch",
    "run_in_process": "corral.sandbox._twin_cell",
}

__all__ = [
    "DEFAULT_PRELOAD",
    "DENIED_SYSCALLS",
    "HEAP_MB",
    "MAX_INTERPRETERS",
    "MAX_REPORTED_PATH",
    "SECCOMP_POLICY",
    "TEMPLATE_LAYER",
    "WHEELHOUSE",
    "CaseServer",
    "CgroupTree",
    "Command",
    "DoctorReport",
    "Done",
    "ErrorReport",
    "Feature",
    "FileReport",
    "FittedText",
    "Handler",
    "Holder",
    "HolderLike",
    "InProcessBackend",
    "InputSpec",
    "IsolatedBackend",
    "Launch",
    "OutputSink",
    "PoolStatistics",
    "RunLimits",
    "RunRequest",
    "SandboxBackend",
    "SandboxCgroup",
    "SandboxFiles",
    "SeccompPolicy",
    "StaticLimits",
    "SyscallGroup",
    "TwinIO",
    "TwinReply",
    "Usage",
    "WarmPool",
    "Worker",
    "WorkerReport",
    "Zygote",
    "ZygoteLike",
    "as_fs_owner",
    "doctor",
    "key_group",
    "prelaunched",
    "run_in_process",
]

if not typing.TYPE_CHECKING:  # mypy reads the imports above
    __getattr__, __dir__ = _public.lazy_exports(globals(), _EXPORTS)

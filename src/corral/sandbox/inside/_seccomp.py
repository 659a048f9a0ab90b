"""The worker's seccomp policy, compiled once by libseccomp and loaded as raw BPF.

Policy: allow by default, and refuse with ``EPERM`` every call that reaches kernel surface a
computation never needs and that sandbox escapes have historically used:

* process inspection and control of others: ptrace, process_vm_readv/writev, kcmp, pidfd_getfd
* (un)mounting and namespaces: mount, umount2, pivot_root, chroot, unshare, setns, the new
  mount API (open_tree, move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr), and
  clone with any namespace flag; clone3 answers ``ENOSYS`` so libc falls back to clone, whose
  flags a filter can inspect
* kernel keyrings: add_key, request_key, keyctl
* bpf, perf_event_open, userfaultfd, io_uring_setup/enter/register
* kernel modules and reboot: init_module, finit_module, delete_module, kexec_load,
  kexec_file_load, reboot
* host-wide settings: swapon, swapoff, acct, quotactl, settimeofday, clock_settime,
  clock_adjtime, adjtimex, sethostname, setdomainname, syslog, iopl, ioperm, vhangup,
  lookup_dcookie, nfsservctl, open_by_handle_at, name_to_handle_at, fanotify_init

Everything else (files, sockets of any family, fork within the pid limit, threads, signals to
processes of the worker's own pid namespace) stays allowed: user namespaces, no capabilities,
no network interface and rlimits bound those.
"""

from __future__ import annotations

import errno
import tempfile

__all__ = ["DENIED_SYSCALLS", "build_policy_bpf"]

DENIED_SYSCALLS: tuple[str, ...] = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "add_key", "request_key", "keyctl",
    "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "sethostname", "setdomainname", "syslog", "iopl", "ioperm", "vhangup",
    "lookup_dcookie", "nfsservctl", "open_by_handle_at", "name_to_handle_at", "fanotify_init",
)  # fmt: skip

_NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)


def build_policy_bpf() -> bytes:
    """Compile the policy for this machine's architecture into raw BPF.

    Raises:
        OSError: libseccomp is missing or rejects the policy.
    """
    import pyseccomp as seccomp

    policy = seccomp.SyscallFilter(seccomp.ALLOW)
    deny = seccomp.ERRNO(errno.EPERM)
    for name in DENIED_SYSCALLS:
        try:
            policy.add_rule(deny, name)
        except (OSError, ValueError, RuntimeError):
            continue  # not a syscall on this architecture
    policy.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for flag in _NAMESPACE_FLAGS:
        policy.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    with tempfile.TemporaryFile() as out:
        policy.export_bpf(out)
        out.seek(0)
        program = out.read()
    if not program or len(program) % 8:
        raise OSError("libseccomp produced no usable BPF program")
    return program

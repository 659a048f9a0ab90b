"""The worker's seccomp policy: an allowlist, kept as data, compiled once into raw BPF.

Three answers, decided per system call number:

* **allow** what CPython, numpy, pandas, matplotlib, subprocess and multiprocessing use
  (found by tracing the test suite and a corpus of user code, ``scripts/seccomp_survey.py``),
  grouped below by purpose;
* ``EPERM`` for the calls the policy knows and refuses: kernel surface a computation never
  needs and that sandbox escapes have used (other processes' memory, mounts and namespaces,
  keyrings, bpf, io_uring, modules, host-wide settings);
* ``ENOSYS`` for every number the policy does not know, including all past its highest and
  those of another ABI (x32, i386): a kernel newer than this list adds calls nobody has
  reviewed, and ``ENOSYS`` is what libc expects from an older kernel, so it falls back.

Argument filters narrow three calls: ``socket``/``socketpair`` only for ``AF_UNIX``,
``AF_INET`` and ``AF_INET6`` (``EAFNOSUPPORT`` otherwise, as a kernel without the family
says; vsock would reach the hypervisor, netlink and packet sockets the kernel's network
configuration); ``clone`` only without namespace flags; ``clone3`` answers ``ENOSYS``, since
its flags live in memory a filter cannot read, and glibc falls back to ``clone``.

The zygote compiles the policy once, as root before it drops privileges (or loads the copy
it cached last time, ``_seccomp_cache``); every worker loads the same bytes with one
``prctl``. The kernel checks and JIT-compiles the program in each worker: about 0.3 ms here,
0.18 ms of which any filter costs, however short. libseccomp lays the rules out as a binary
search, so a call costs a handful of comparisons.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

__all__ = [
    "DENIED_SYSCALLS",
    "SECCOMP_POLICY",
    "SeccompPolicy",
    "SyscallGroup",
    "build_policy_bpf",
]


@dataclass(frozen=True, slots=True)
class SyscallGroup:
    """System calls that share one reason to be allowed or refused."""

    why: str
    names: tuple[str, ...]


ALLOWED: tuple[SyscallGroup, ...] = (
    SyscallGroup("file descriptors: read, write, seek, duplicate, pipes", (
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
        "preadv2", "pwritev2", "lseek", "close", "close_range", "dup", "dup2", "dup3", "fcntl",
        "ioctl", "pipe", "pipe2", "sendfile", "copy_file_range", "splice", "tee",
    )),
    SyscallGroup("opening files and syncing them", (
        "open", "openat", "openat2", "creat", "flock", "fsync", "fdatasync", "sync",
        "syncfs", "sync_file_range", "ftruncate", "truncate", "fallocate", "fadvise64",
        "readahead",
    )),
    SyscallGroup("file metadata and directories (the worker's own tmpfs, read-only binds)", (
        "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access",
        "faccessat", "faccessat2", "getdents", "getdents64", "getcwd", "chdir", "fchdir",
        "mkdir", "mkdirat", "rmdir", "rename", "renameat", "renameat2", "link", "linkat",
        "unlink", "unlinkat", "symlink", "symlinkat", "readlink", "readlinkat", "chmod",
        "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "umask",
        "utime", "utimes", "utimensat", "futimesat", "mknod", "mknodat",
    )),
    SyscallGroup("extended attributes and file change notification", (
        "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
        "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
        "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    )),
    SyscallGroup("memory: the allocator, mmap'd files, numpy's and BLAS's buffers", (
        "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore", "mlock",
        "mlock2", "munlock", "munlockall", "memfd_create", "membarrier", "get_mempolicy",
        "set_mempolicy", "mbind", "pkey_mprotect", "pkey_alloc", "pkey_free",
        "map_shadow_stack", "mseal",
    )),
    SyscallGroup("processes and threads (clone is filtered below)", (
        "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
        "set_tid_address", "set_robust_list", "get_robust_list", "futex", "futex_waitv",
        "futex_wake", "futex_wait", "futex_requeue", "rseq", "arch_prctl", "prctl",
        "set_thread_area", "get_thread_area", "pidfd_open", "pidfd_send_signal", "seccomp",
        "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    )),
    SyscallGroup("identity, limits and scheduling of the worker's own processes", (
        "getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid",
        "getuid", "geteuid", "getgid", "getegid", "getgroups", "getresuid", "getresgid",
        "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid",
        "setfsgid", "capget", "getrlimit", "setrlimit", "prlimit64", "getrusage", "times",
        "uname", "sysinfo", "getcpu", "getpriority", "setpriority", "ioprio_get",
        "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam",
        "sched_setparam", "sched_getscheduler", "sched_setscheduler", "sched_getattr",
        "sched_setattr", "sched_get_priority_max", "sched_get_priority_min",
        "sched_rr_get_interval",
    )),
    SyscallGroup("signals and timers", (
        "kill", "tkill", "tgkill", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn",
        "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
        "rt_sigsuspend", "sigaltstack", "pause", "alarm", "getitimer", "setitimer",
        "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete",
        "signalfd", "signalfd4", "eventfd", "eventfd2", "timerfd_create", "timerfd_settime",
        "timerfd_gettime", "restart_syscall",
    )),
    SyscallGroup("clocks and sleeping", (
        "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday",
        "time",
    )),
    SyscallGroup("waiting on descriptors (selectors, asyncio)", (
        "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
        "epoll_wait", "epoll_pwait", "epoll_pwait2",
    )),
    SyscallGroup("sockets in the worker's own network namespace (socket is filtered below)", (
        "bind", "listen", "accept", "accept4", "connect", "getsockname", "getpeername",
        "getsockopt", "setsockopt", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg",
        "recvmmsg", "shutdown",
    )),
    SyscallGroup("System V and POSIX IPC, confined to the worker's own ipc namespace", (
        "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semctl", "semtimedop",
        "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend",
        "mq_timedreceive", "mq_notify", "mq_getsetattr",
    )),
    SyscallGroup("randomness", ("getrandom",)),
)  # fmt: skip

REFUSED: tuple[SyscallGroup, ...] = (
    SyscallGroup("inspecting or controlling other processes", (
        "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
        "process_madvise", "process_mrelease", "move_pages", "migrate_pages",
    )),
    SyscallGroup("mounts, namespaces and the mount API", (
        "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "open_tree",
        "open_tree_attr", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
        "mount_setattr", "statmount", "listmount",
    )),
    SyscallGroup("kernel keyrings", ("add_key", "request_key", "keyctl")),
    SyscallGroup("kernel attack surface: bpf, perf, userfaultfd, io_uring, ldt", (
        "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
        "io_uring_register", "modify_ldt", "memfd_secret", "cachestat",
    )),
    SyscallGroup("kernel modules and reboot", (
        "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
        "reboot",
    )),
    SyscallGroup("host-wide settings and privileged file handles", (
        "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "settimeofday",
        "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname", "syslog",
        "iopl", "ioperm", "vhangup", "lookup_dcookie", "nfsservctl", "open_by_handle_at",
        "name_to_handle_at", "fanotify_init", "fanotify_mark", "capset", "setgroups",
        "personality", "ioprio_set", "mlockall", "lsm_set_self_attr",
    )),
)  # fmt: skip

# Calls newer than some libseccomp releases name: the same number on every architecture
# (asm-generic numbering from 424 on), so rules for them need no name table of libseccomp's.
_UNIFIED_NUMBERS = {
    "cachestat": 451, "fchmodat2": 452, "map_shadow_stack": 453, "futex_wake": 454,
    "futex_wait": 455, "futex_requeue": 456, "statmount": 457, "listmount": 458,
    "lsm_set_self_attr": 460, "mseal": 462, "open_tree_attr": 467,
}  # fmt: skip

_AF_UNIX, _AF_INET, _AF_INET6 = 1, 2, 10
SOCKET_FAMILIES = (_AF_UNIX, _AF_INET, _AF_INET6)
"""Address families a worker may open sockets of."""

NAMESPACE_FLAGS = (
    0x00000080  # CLONE_NEWTIME
    | 0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
"""clone flags that would make a new namespace; a worker's clone may carry none of them."""

DENIED_SYSCALLS: tuple[str, ...] = tuple(name for group in REFUSED for name in group.names)
"""Every call the policy refuses with ``EPERM``."""


@dataclass(frozen=True, slots=True)
class SeccompPolicy:
    """The allowlist as data; :meth:`compile` turns it into this machine's BPF."""

    allowed: tuple[SyscallGroup, ...]
    refused: tuple[SyscallGroup, ...]

    def allowed_names(self) -> frozenset[str]:
        """Every call allowed, with or without an argument filter."""
        names = {name for group in self.allowed for name in group.names}
        return frozenset(names | {"clone", "socket", "socketpair"})

    def as_dict(self) -> dict[str, object]:
        """The policy as ``corral doctor --json`` prints it."""

        def groups(of: tuple[SyscallGroup, ...]) -> list[dict[str, object]]:
            return [{"why": g.why, "syscalls": list(g.names)} for g in of]

        return {
            "default": "ENOSYS",
            "allow": groups(self.allowed),
            "eperm": groups(self.refused),
            "filtered": [
                {"syscall": "socket", "allow": "domain is AF_UNIX, AF_INET or AF_INET6",
                 "else": "EAFNOSUPPORT"},
                {"syscall": "socketpair", "allow": "domain is AF_UNIX, AF_INET or AF_INET6",
                 "else": "EAFNOSUPPORT"},
                {"syscall": "clone", "allow": "no namespace flag", "else": "EPERM"},
                {"syscall": "clone3", "allow": "never", "else": "ENOSYS"},
            ],
        }  # fmt: skip

    def compile(self) -> bytes:
        """Compile the policy for this machine's architecture into raw BPF.

        Raises:
            OSError: libseccomp is missing or rejects the policy.
        """
        import tempfile

        import pyseccomp as seccomp

        policy = seccomp.SyscallFilter(seccomp.ERRNO(errno.ENOSYS))
        policy.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.ERRNO(errno.ENOSYS))
        policy.set_attr(seccomp.Attr.CTL_OPTIMIZE, 2)  # a binary search, not a linear scan
        allow, eperm = seccomp.ALLOW, seccomp.ERRNO(errno.EPERM)
        for action, groups in ((allow, self.allowed), (eperm, self.refused)):
            for group in groups:
                for name in group.names:
                    number = _number(seccomp, name)
                    if number is not None:
                        policy.add_rule(action, number)
        no_family = seccomp.ERRNO(errno.EAFNOSUPPORT)
        for call in ("socket", "socketpair"):
            for family in SOCKET_FAMILIES:
                policy.add_rule(allow, call, seccomp.Arg(0, seccomp.EQ, family))
            for family in range(_AF_INET6):
                if family not in SOCKET_FAMILIES:
                    policy.add_rule(no_family, call, seccomp.Arg(0, seccomp.EQ, family))
            policy.add_rule(no_family, call, seccomp.Arg(0, seccomp.GT, _AF_INET6))
        policy.add_rule(allow, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, NAMESPACE_FLAGS, 0))
        for flag in (1 << bit for bit in range(32)):
            if flag & NAMESPACE_FLAGS:
                policy.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
        # clone3 is in neither list: the default answers it ENOSYS (libseccomp refuses a rule
        # that repeats the default action).
        with tempfile.TemporaryFile() as out:
            policy.export_bpf(out)
            out.seek(0)
            program = out.read()
        if not program or len(program) % 8:
            raise OSError("libseccomp produced no usable BPF program")
        return program


def _number(seccomp: object, name: str) -> int | None:
    """The call's number on this architecture, or None where it does not exist here."""
    resolve = seccomp.resolve_syscall  # type: ignore[attr-defined]
    number = int(resolve(seccomp.Arch.NATIVE, name))  # type: ignore[attr-defined]
    if number >= 0:
        return number
    return _UNIFIED_NUMBERS.get(name)


SECCOMP_POLICY = SeccompPolicy(allowed=ALLOWED, refused=REFUSED)
"""The policy every worker runs under."""


def build_policy_bpf() -> bytes:
    """Compile :data:`SECCOMP_POLICY` (the zygote calls this once, at start)."""
    return SECCOMP_POLICY.compile()

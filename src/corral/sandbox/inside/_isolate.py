"""Inside a fresh worker: enter the template root, lock the process down, bound each run.

``enter`` runs right after the namespace clone: id maps, the worker's own file systems, pivot,
hostname and environment. ``lock_down`` runs before the worker reports ready, so a pooled
worker is already fully isolated while it waits: every capability dropped, no_new_privs,
seccomp, static rlimits. ``bound_run`` only lowers limits once a request names them.

Inputs arrive without privileges: ``/inputs`` is a read-only bind of a tmpfs whose writable
mount is detached; the worker hands the engine a descriptor of that tmpfs before any user code
exists, and the engine writes the files through it.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
from collections.abc import Mapping

from corral.sandbox import _syscalls as sc
from corral.sandbox._control_protocol import NO_FILES, TEMPLATE_LAYER, SandboxFiles
from corral.sandbox._protocol import RunLimits
from corral.sandbox.inside._proc_masks import MASKS, PROC_MASKS
from corral.sandbox.inside._rootfs import DATA_STAGE, DATA_TARGET

__all__ = [
    "BYTES_PER_INODE",
    "CPU_CEILING_SECONDS",
    "INPUTS_BYTES",
    "PACKAGES",
    "PACKAGES_SITE",
    "SANDBOX_ENV",
    "SHM_BYTES",
    "TEMPLATE_SITE",
    "bound_run",
    "enter",
    "lock_down",
    "tmpfs_options",
]

PACKAGES = "/work/.local"
"""The prefix pip installs into inside a sandbox: the sandbox's own ``/work``, so a
session's packages are its own and go with it."""
PACKAGES_SITE = f"{PACKAGES}/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
_INTERPRETER_BIN = os.path.dirname(sys.executable)
"""``python``, ``pip`` and the scripts of corral's environment come first: the interpreter
that runs cells, not the host's system Python."""

SANDBOX_ENV: Mapping[str, str] = {
    "PATH": f"{PACKAGES}/bin:{_INTERPRETER_BIN}:/usr/local/bin:/usr/bin:/bin",
    "HOME": "/work",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "USER": "sandbox",
    "MPLBACKEND": "Agg",
    "PLOTLY_RENDERER": "plotly_mimetype",
    "MPLCONFIGDIR": "/tmp/matplotlib",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    # pip installs into the sandbox's prefix (the environment's own site-packages are read
    # only) and every Python in the sandbox imports from it; the index and a wheelhouse come
    # from /etc/pip.conf, which the operator's [packages] writes. Fail fast, ask nothing.
    "PYTHONPATH": PACKAGES_SITE,
    "PIP_PREFIX": PACKAGES,
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_INPUT": "1",
    "PIP_RETRIES": "1",
    "PIP_TIMEOUT": "15",
    # Every TLS client trusts the sandbox's bundle (the host's CAs, and corral's own where it
    # adds headers to a host's requests).
    "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
    "REQUESTS_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",
    "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt",
    "CURL_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",
    "NODE_EXTRA_CA_CERTS": "/etc/ssl/certs/ca-certificates.crt",
}
TEMPLATE_SITE = f"{TEMPLATE_LAYER}/site-packages"
"""A template's packages inside its sandboxes: after the sandbox's own, before the runtime's."""
_NOSUID_NODEV = sc.MS_NOSUID | sc.MS_NODEV
_template = NO_FILES
_environment: Mapping[str, str] = SANDBOX_ENV
_environment_is_ours = False
"""Whether the zygote's environment is the sandbox's already (``settle_environment``)."""


def use_template(files: SandboxFiles) -> None:
    """Set by the zygote for every worker it clones: the template's environment, working
    folder and packages apply to each sandbox, never to the zygote itself."""
    global _template, _environment
    _template = files
    if not files.layer:
        return
    # Imported here, once: every worker of the zygote uses them before it is ready.
    import shutil  # noqa: F401
    import site  # noqa: F401

    env = dict(SANDBOX_ENV)
    env["PYTHONPATH"] = f"{PACKAGES_SITE}:{TEMPLATE_SITE}"
    env.update(files.layer_env)
    _environment = env


def settle_environment() -> None:
    """Called by the zygote once it is ready to clone: whether its environment is already
    what every worker needs, found once instead of compared again in each worker (a
    comparison decodes every variable, and each object it touches is a page the worker
    copies)."""
    global _environment_is_ours
    _environment_is_ours = dict(os.environ) == dict(_environment)


def use_template_packages() -> tuple[str, ...]:
    """Put the template's packages on ``sys.path`` right after the sandbox's own (its
    ``.pth`` files read here, once the worker is locked down); the modules to preload."""
    if not _template.layer:
        return ()
    import site

    known = set(sys.path)
    site.addsitedir(TEMPLATE_SITE)
    added = [p for p in sys.path if p not in known]
    for path in added:
        sys.path.remove(path)
    at = sys.path.index(PACKAGES_SITE) + 1 if PACKAGES_SITE in sys.path else 0
    sys.path[at:at] = added
    return _template.layer_preload


_DEVPTS_FLAGS = sc.MS_NOSUID | sc.MS_NOEXEC
_DEVPTS_OPTIONS = "newinstance,ptmxmode=0666,mode=0600,max=64"
_INPUTS_STAGING = "/tmp/.corral-inputs"
SHM_BYTES = 64 << 20
"""Size of a worker's ``/dev/shm`` (multiprocessing's semaphores and shared arrays)."""
INPUTS_BYTES = 256 << 20
"""Size of the file system the engine writes a run's inputs into."""
BYTES_PER_INODE = 4096
"""Each tmpfs gets one inode per page of its size: a file holding data takes a page anyway.
The default (half the host's pages) would let empty files and user xattrs, whose room the
kernel counts as 1 KiB an inode, take gigabytes of kernel memory while the file system
reports itself empty; bounded so, both stay in proportion to the size and inside the
sandbox's memory cgroup."""
_MIN_INODES = 1024
CPU_CEILING_SECONDS = 24 * 3600
"""CPU seconds any one process of a sandbox may use in its life (its hard RLIMIT_CPU). A
run's own limit is far lower; this bounds a session's interpreter and its commands, which
live across runs, and is what code cannot raise."""


def tmpfs_options(mode: int, size: int) -> str:
    """Mount options for a worker's tmpfs of ``size`` bytes, its inodes bounded with it."""
    inodes = max(size // BYTES_PER_INODE, _MIN_INODES)
    return f"mode={mode:04o},size={size},nr_inodes={inodes}"


def enter(
    *,
    template: str,
    staged: list[tuple[str, str]],
    work_bytes: int,
    session_disk_bytes: int | None = None,
) -> tuple[str, int]:
    """Build the worker's mounts on the template and pivot into it.

    The zygote has mapped the worker's ids already (onto a host uid of the worker's own).

    Returns the working directory user code starts in and a descriptor of the writable
    inputs file system (for the engine; the worker closes its copy once it has passed it on).
    """
    root = template
    # The zygote has put us in our cgroup already: from now on /proc/self/cgroup says "/",
    # not where corral's tree sits on the host.
    sc.unshare(sc.CLONE_NEWCGROUP)
    # Mounts copied from the zygote's namespace are locked; pivot_root needs a root of our own.
    sc.mount(root, root, None, sc.MS_BIND | sc.MS_REC)
    sc.mount("work", f"{root}/work", "tmpfs", _NOSUID_NODEV, tmpfs_options(0o755, work_bytes))
    sc.mount("tmp", f"{root}/tmp", "tmpfs", _NOSUID_NODEV, tmpfs_options(0o1777, work_bytes))
    shm = tmpfs_options(0o1777, SHM_BYTES)
    sc.mount("shm", f"{root}/dev/shm", "tmpfs", _NOSUID_NODEV | sc.MS_NOEXEC, shm)
    staging = f"{root}{_INPUTS_STAGING}"
    os.mkdir(staging, 0o700)
    inputs = tmpfs_options(0o755, INPUTS_BYTES)
    sc.mount("inputs", staging, "tmpfs", _NOSUID_NODEV | sc.MS_NOEXEC, inputs)
    sc.mount(staging, f"{root}/inputs", None, sc.MS_BIND)
    sc.mount(
        None,
        f"{root}/inputs",
        None,
        sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | _NOSUID_NODEV | sc.MS_NOEXEC,
    )
    cwd = "/work"
    if session_disk_bytes is None:
        # DIAL code writes to /mnt/data; in a one-shot run that is the same fresh /work.
        sc.mount(f"{root}/work", f"{root}/mnt/data", None, sc.MS_BIND)
    elif os.path.isdir(f"{root}{DATA_STAGE}"):
        # Container mode: the session's files are a host folder, kept across restarts.
        cwd = _bind_data_folder(root)
    else:
        # The session's files outlive interpreter restarts: they live as long as the holder.
        data = tmpfs_options(0o755, session_disk_bytes)
        sc.mount("data", f"{root}/mnt/data", "tmpfs", _NOSUID_NODEV, data)
        # E2B's clients know the same folder as the home of user ``user``.
        sc.mount(f"{root}/mnt/data", f"{root}/home/user", None, sc.MS_BIND)
        cwd = "/mnt/data"
        # Terminals for E2B's PTYs: a devpts instance of the session's own (newinstance),
        # so its ptys are numbered, owned and seen inside this sandbox alone.
        sc.mount("devpts", f"{root}/dev/pts", "devpts", _DEVPTS_FLAGS, _DEVPTS_OPTIONS)
    if os.path.isdir(f"{root}{DATA_STAGE}"):
        # Nothing but a session holder sees the host folder; the others get an empty cover.
        sc.mount("none", f"{root}{DATA_STAGE}", "tmpfs", sc.MS_RDONLY | _NOSUID_NODEV, "size=4k")
    for stage, path in staged:
        # Runtime directories under /work or /tmp reappear inside the fresh file systems.
        os.makedirs(f"{root}{path}", exist_ok=True)
        sc.mount(f"{root}{stage}", f"{root}{path}", None, sc.MS_BIND | sc.MS_REC)
    sc.mount("proc", f"{root}/proc", "proc", _NOSUID_NODEV | sc.MS_NOEXEC)
    for mask, target in PROC_MASKS:
        sc.mount(f"{root}{MASKS}/{mask}", f"{root}/proc/{target}", None, sc.MS_BIND)
    os.chdir(root)
    sc.pivot_root(".", ".")
    sc.umount(".", sc.MNT_DETACH)
    os.chdir("/")
    inputs_fd = os.open(_INPUTS_STAGING, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    sc.umount(_INPUTS_STAGING, sc.MNT_DETACH)
    os.rmdir(_INPUTS_STAGING)
    sc.sethostname("corral")
    # A session of its own, and with it a scheduler autogroup of its own: any process may
    # raise the nice value of its autogroup (/proc/self/autogroup), which would otherwise be
    # the zygote's, shared by every worker.
    os.setsid()
    if not _environment_is_ours:
        # Where the zygote's own environment is the sandbox's already, rebuilding it would
        # cost every worker a rewrite of libc's environment block for nothing.
        os.environ.clear()
        os.environ.update(_environment)
    with contextlib.suppress(FileExistsError):  # a staged runtime path may have made it
        os.mkdir(SANDBOX_ENV["MPLCONFIGDIR"])
    if _template.layer:
        _copy_template_files(cwd)
    return cwd, inputs_fd


def _copy_template_files(home: str) -> None:
    """The template's files into the sandbox's home, as the sandbox's own (writable, in its
    quota), and its working folder: done while a worker waits in the pool and once per
    session, so a run never waits for it. The layer is what the server wrote, read-only."""
    import shutil

    files = f"{TEMPLATE_LAYER}/files"
    with contextlib.suppress(OSError):
        if os.listdir(files):
            shutil.copytree(files, home, symlinks=True, dirs_exist_ok=True)
    if _template.layer_workdir:
        os.makedirs(f"{home}/{_template.layer_workdir}", exist_ok=True)


def has_template() -> bool:
    return bool(_template.layer)


def template_workdir(home: str) -> str | None:
    """Where a template's code starts (its files are in ``home``); None: the home itself."""
    return f"{home}/{_template.layer_workdir}" if _template.layer_workdir else None


def _bind_data_folder(root: str) -> str:
    """Bind the template's data folder at ``/mnt/data`` and at its host path; the cwd."""
    sc.mount(f"{root}{DATA_STAGE}", f"{root}/mnt/data", None, sc.MS_BIND)
    with open(f"{root}{DATA_TARGET}") as named:
        target = named.read().strip()
    if not target:
        return "/mnt/data"
    sc.mount(f"{root}{DATA_STAGE}", f"{root}{target}", None, sc.MS_BIND)
    return target


def lock_down(*, seccomp_bpf: bytes, pids: int, file_bytes: int, open_files: int) -> None:
    """Drop every privilege and apply the static rlimits; irreversible.

    The CPU limit's hard ceiling is set here too, so code can never lift it (a run lowers
    it further; a session's interpreter keeps it across its runs).
    """
    for limit, value in (
        (resource.RLIMIT_NPROC, pids),
        (resource.RLIMIT_FSIZE, file_bytes),
        (resource.RLIMIT_NOFILE, open_files),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_CPU, CPU_CEILING_SECONDS),
    ):
        resource.setrlimit(limit, (value, value))
    sc.drop_capabilities()
    sc.set_no_new_privs()
    sc.load_seccomp_bpf(seccomp_bpf)


def bound_run(
    *,
    memory_bytes: int,
    cpu_seconds: int,
    pids: int,
    file_bytes: int,
    open_files: int,
    session: bool,
) -> None:
    """Lower the limits for one run (an unprivileged process may only lower them).

    A session's CPU limit stays soft: its interpreter accumulates CPU time across runs, and
    the engine's deadline, not this backstop, is what stops a run.
    """
    vm_size = _current_vm_bytes()
    cpu_used = int(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]))
    for limit, value, hard_too in (
        (resource.RLIMIT_AS, vm_size + memory_bytes, True),
        (resource.RLIMIT_CPU, cpu_used + cpu_seconds, not session),
        (resource.RLIMIT_NPROC, pids, True),
        (resource.RLIMIT_FSIZE, file_bytes, True),
        (resource.RLIMIT_NOFILE, open_files, True),
    ):
        _soft, hard = resource.getrlimit(limit)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(limit, (value, value if hard_too else hard))


def bound_run_to(limits: RunLimits, *, session: bool) -> None:
    """``bound_run`` with a request's limits."""
    bound_run(
        memory_bytes=limits.memory_bytes,
        cpu_seconds=limits.cpu_seconds,
        pids=limits.pids,
        file_bytes=limits.file_bytes,
        open_files=limits.open_files,
        session=session,
    )


def _current_vm_bytes() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")

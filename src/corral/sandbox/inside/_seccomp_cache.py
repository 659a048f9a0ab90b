"""The compiled seccomp policy, cached in corral's private runtime directory.

Compiling the policy (loading pyseccomp, whose import runs ``ldconfig`` twice to find its
libraries, then libseccomp itself) is most of what a zygote spends before it can fork; a
server pays it once, ``corral run`` on every command. The BPF depends only on the policy, on
the code that compiles it, on libseccomp and on the machine, so it is kept in one file keyed
by all four (in its name and, in full, in its header), and compiled again whenever anything
about it is off.

The directory is the zygote's cache folder, which the engine created root-owned, mode 0700,
reached without links (``host/_runtime``), and the zygote uses it as root before it drops
privileges. Nothing in it is trusted for being there: the file is opened without following
a link, used only when it is a regular file of ours that nobody else may write, of a sane
size, whose header names this exact key and the digest of the program it holds. Anything
else is replaced, by writing a fresh file beside it and renaming it over (a rename replaces
a planted link, never follows it). The cache is a shortcut, never a dependency: when it
cannot be read or written, the policy is compiled as without it.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import stat

from corral.sandbox._syscalls import write_all
from corral.sandbox.inside import _seccomp

__all__ = ["MAX_PROGRAM_BYTES", "cache_key", "cache_name", "load_policy_bpf"]

_MAGIC = b"corral seccomp bpf 1\n"
_DIGEST = 32  # bytes of a SHA-256
_HEADER = len(_MAGIC) + 2 * _DIGEST  # the magic line, the key, the program's digest
MAX_PROGRAM_BYTES = 4096 * 8
"""The kernel's limit: BPF_MAXINSNS instructions of 8 bytes each."""
_LIBSECCOMP = "libseccomp.so.2"  # by soname: ctypes.util.find_library would run ldconfig
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]


def _libseccomp_identity() -> str:
    """libseccomp's version, the kernel API level it found and its native architecture.

    Raises:
        OSError: libseccomp cannot be loaded.
    """
    lib = ctypes.CDLL(_LIBSECCOMP)
    lib.seccomp_version.restype = ctypes.POINTER(_Version)
    lib.seccomp_api_get.restype = ctypes.c_uint
    lib.seccomp_arch_native.restype = ctypes.c_uint32
    version = lib.seccomp_version().contents
    return (
        f"libseccomp {version.major}.{version.minor}.{version.micro} "
        f"api {lib.seccomp_api_get()} arch {lib.seccomp_arch_native():#x}"
    )


def cache_key() -> bytes:
    """What the compiled program depends on: the policy and the code that compiles it (the
    module's own file), libseccomp, and this machine's architecture.

    Raises:
        OSError: libseccomp cannot be loaded, or the policy module's file cannot be read.
    """
    digest = hashlib.sha256()
    with open(_seccomp.__file__, "rb") as source:
        digest.update(source.read())
    digest.update(f"\0{_libseccomp_identity()}\0{platform.machine()}".encode())
    return digest.digest()


def cache_name(key: bytes) -> str:
    """The file for ``key``: each corral and libseccomp version keeps its own, so installs
    that share the runtime directory do not evict each other's."""
    return f"seccomp-{key.hex()[:16]}.bpf"


def load_policy_bpf(cache_dir: str | None) -> bytes:
    """The policy's BPF for this machine: from the cache when it holds a verified copy for
    this key, else compiled (and, where possible, cached for the next start).

    Raises:
        OSError: libseccomp is missing or rejects the policy.
    """
    if cache_dir is None:
        return _seccomp.build_policy_bpf()
    try:
        key = cache_key()
        dir_fd = _open_private_dir(cache_dir)
    except OSError:
        return _seccomp.build_policy_bpf()
    try:
        cached = _read(dir_fd, key)
        if cached is not None:
            return cached
        program = _seccomp.build_policy_bpf()
        with contextlib.suppress(OSError):  # a full disk, say: the next start compiles again
            _write(dir_fd, key, program)
        return program
    finally:
        os.close(dir_fd)


def _open_private_dir(path: str) -> int:
    """The cache folder's descriptor, if it is a real directory of ours that only we write.

    Raises:
        OSError: it is not (a link, another owner, writable by others).
    """
    fd = os.open(path, _DIR_FLAGS)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise PermissionError(f"{path} is not corral's private folder")
    return fd


def _read(dir_fd: int, key: bytes) -> bytes | None:
    """The cached program when the file is sound and names ``key``; None otherwise."""
    try:
        fd = os.open(cache_name(key), _READ_FLAGS, dir_fd=dir_fd)
    except OSError:  # missing, or a link (ELOOP)
        return None
    try:
        info = os.fstat(fd)
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_uid != os.geteuid()
            or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            or info.st_nlink != 1
            or not _HEADER < info.st_size <= _HEADER + MAX_PROGRAM_BYTES
        ):
            return None
        data = _read_exactly(fd, info.st_size)
    except OSError:
        return None
    finally:
        os.close(fd)
    if data is None or not data.startswith(_MAGIC):
        return None
    named = data[len(_MAGIC) : len(_MAGIC) + _DIGEST]
    digest, program = data[len(_MAGIC) + _DIGEST : _HEADER], data[_HEADER:]
    if named != key or hashlib.sha256(program).digest() != digest or len(program) % 8:
        return None
    return program


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            return None  # shorter than it said: being rewritten, or truncated
        chunks.append(chunk)
        left -= len(chunk)
    if os.read(fd, 1):
        return None  # longer than it said
    return b"".join(chunks)


def _write(dir_fd: int, key: bytes, program: bytes) -> None:
    """Replace the cache file atomically; a link or file planted under its name is replaced.

    Raises:
        OSError: it could not be written (the cache then stays as it was).
    """
    name = cache_name(key)
    temporary = f".{name}.{os.urandom(8).hex()}"
    fd = os.open(temporary, _WRITE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        try:
            payload = _MAGIC + key + hashlib.sha256(program).digest() + program
            write_all(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise

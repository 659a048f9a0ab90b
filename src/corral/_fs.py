"""File operations confined to a root folder that untrusted code can also write.

Sandboxed code may plant symbolic links in a session folder at any moment, while the server,
which sees the whole host, reads and writes the same folder. Resolving a path and then opening
it is therefore never enough: every path is resolved component by component from a directory
descriptor, and no symbolic link is ever followed (``openat2`` with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS``, or a walk with ``O_NOFOLLOW`` descriptors where ``openat2`` is missing).
A link anywhere in a path makes it :class:`~corral.errors.InvalidPath`; links are never listed.

Read operations treat anything that is not a regular file (missing, a directory, a FIFO, a path
through a file, one the sandboxed code made unreadable) as :class:`FileNotFoundError`. Write
operations treat a path through a file or onto a directory as
:class:`~corral.errors.InvalidPath`. Anything else a permission refuses (a folder the code made
``chmod 0``, and the root itself when it did so there) is :class:`~corral.errors.AccessDenied`,
never a bare ``PermissionError``: it is the caller's request that cannot be done, not the
server that failed. The root itself is trusted not to be a link.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import secrets
import shutil
import stat as stat_module
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import PurePosixPath
from types import TracebackType
from typing import NamedTuple, ParamSpec, TypeVar

import anyio.to_thread

from corral.errors import AccessDenied, FileTooLarge, InvalidPath

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "NAME_MAX",
    "PATH_MAX",
    "TEMP_PREFIX",
    "AtomicWriter",
    "FileEntry",
    "Listing",
    "create_private_file",
    "delete",
    "disk_usage",
    "list_dir",
    "list_files",
    "lstat",
    "make_dir",
    "make_private_dir",
    "move",
    "open_file",
    "read_bytes",
    "remove_tree",
    "stat",
    "validate_relpath",
    "write_atomic",
]

StrPath = str | os.PathLike[str]
P = ParamSpec("P")
R = TypeVar("R")

TEMP_PREFIX = ".corral-tmp-"
"""Names of in-progress writes where ``O_TMPFILE`` is unavailable; never listed."""

_READ_CHUNK = 1024 * 1024  # bytes per read() call; bounds one allocation, not the file
NAME_MAX = 255  # bytes in one path component (Linux)
PATH_MAX = 4096  # bytes in a whole path, with its terminating NUL (Linux)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_OPENAT2_RETRIES = 8  # EAGAIN means a concurrent rename raced the lookup; it is safe to retry
# openat2 is syscall 437 in the generic table, used by both x86_64 and aarch64.
_OPENAT2_NR = {"x86_64": 437, "aarch64": 437}.get(platform.machine())
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)  # unnamed until complete: a crash leaves nothing
_BASE_FLAGS = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY


class FileEntry(NamedTuple):
    """A regular file found by :func:`list_files`."""

    path: str
    size: int


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


class _Openat2:
    """``openat2(2)`` through libc's ``syscall``, switched off for good on ENOSYS."""

    def __init__(self) -> None:
        self.available = _OPENAT2_NR is not None
        self._syscall = None
        if self.available:
            try:
                self._syscall = ctypes.CDLL(None, use_errno=True).syscall
                self._syscall.restype = ctypes.c_long
            except (OSError, AttributeError):
                self.available = False

    def __call__(self, dirfd: int, rel: str, flags: int, mode: int) -> int | None:
        """An fd, or None when the kernel lacks openat2 (the caller walks instead)."""
        how = _OpenHow(
            flags, mode, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
        )
        path = os.fsencode(rel)
        assert self._syscall is not None
        for _ in range(_OPENAT2_RETRIES):
            fd = int(self._syscall(_OPENAT2_NR, dirfd, path, ctypes.byref(how), ctypes.sizeof(how)))
            if fd >= 0:
                return fd
            err = ctypes.get_errno()
            if err in (errno.ENOSYS, errno.EPERM):
                # Container seccomp profiles answer unknown syscalls with ENOSYS or EPERM.
                self.available = False
                return None
            if err not in (errno.EAGAIN, errno.EINTR):
                raise OSError(err, os.strerror(err), rel)
        return None


_openat2 = _Openat2()


def validate_relpath(path: StrPath) -> PurePosixPath:
    """Check that ``path`` is a plain relative path and return it normalised.

    ``.`` components and repeated slashes are dropped; nothing else is rewritten.

    Raises:
        InvalidPath: empty, absolute, containing ``..`` or a NUL byte, not valid Unicode
            (a lone surrogate), or a name past ``NAME_MAX`` or a path past ``PATH_MAX`` bytes.
    """
    text = os.fspath(path)
    if "\0" in text:
        raise InvalidPath(f"{text!r}: contains a NUL byte")
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError:
        raise InvalidPath(f"{text!r}: not valid Unicode") from None
    if len(raw) >= PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise InvalidPath(f"{text[:64]!r}...: name too long")
    rel = PurePosixPath(text)
    if rel.is_absolute():
        raise InvalidPath(f"{text}: absolute paths are not allowed")
    if ".." in rel.parts:
        raise InvalidPath(f"{text}: '..' is not allowed")
    if not rel.parts:
        raise InvalidPath(f"{text!r}: empty path")
    return rel


def _is_link(dirfd: int, name: str) -> bool:
    try:
        return stat_module.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_beneath(dirfd: int, rel: str, flags: int, mode: int = 0) -> int:
    """Open ``rel`` below ``dirfd`` without following any link.

    Raises:
        InvalidPath: a component is a symbolic link.
        OSError: anything else (FileNotFoundError, NotADirectoryError, ...).
    """
    flags |= _BASE_FLAGS
    try:
        if _openat2.available:
            # Without O_NOFOLLOW, RESOLVE_NO_SYMLINKS reports a trailing link as ELOOP too.
            fd = _openat2(dirfd, rel, flags & ~os.O_NOFOLLOW, mode)
            if fd is not None:
                return fd
        return _walk_open(dirfd, rel, flags, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EXDEV):
            raise InvalidPath(f"{rel}: crosses a symbolic link") from exc
        if exc.errno == errno.ENAMETOOLONG:
            raise InvalidPath(f"{rel}: name too long") from exc
        raise


def _walk_open(dirfd: int, rel: str, flags: int, mode: int) -> int:
    *parents, last = rel.split("/")
    current = dirfd
    try:
        for name in parents:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _BASE_FLAGS, dir_fd=current)
            except NotADirectoryError as exc:
                # O_NOFOLLOW | O_DIRECTORY reports a link as ENOTDIR; tell the two apart.
                if _is_link(current, name):
                    raise OSError(errno.ELOOP, "symbolic link", rel) from exc
                raise
            if current != dirfd:
                os.close(current)
            current = fd
        try:
            return os.open(last, flags, mode, dir_fd=current)
        except NotADirectoryError as exc:
            if _is_link(current, last):
                raise OSError(errno.ELOOP, "symbolic link", rel) from exc
            raise
    finally:
        if current != dirfd:
            os.close(current)


@contextlib.contextmanager
def _permitted(rel: object) -> Iterator[None]:
    """``PermissionError`` (EACCES, EPERM) as :class:`AccessDenied` naming ``rel``."""
    try:
        yield
    except PermissionError as exc:
        raise AccessDenied(f"{rel}: permission denied") from exc


def _typed_permissions(func: Callable[P, R]) -> Callable[P, R]:
    """``func(root, rel, ...)`` with ``PermissionError`` as :class:`AccessDenied` naming
    ``rel`` (the root when there is none)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with _permitted(args[1] if len(args) > 1 else "."):
            return func(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def _root_fd(root: StrPath) -> Iterator[int]:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _missing(rel: PurePosixPath) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, f"no such file: {rel}", str(rel))


@contextlib.contextmanager
def _reading(rel: PurePosixPath) -> Iterator[None]:
    """Anything that makes a read impossible, except a link, reads as "missing"."""
    try:
        yield
    except (NotADirectoryError, IsADirectoryError) as exc:
        raise _missing(rel) from exc
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.EACCES, errno.ENODEV):
            raise _missing(rel) from exc
        raise


def open_file(root: StrPath, rel: StrPath) -> tuple[int, int]:
    """Open a regular file for reading; returns ``(fd, size at open)``; the caller closes fd.

    Raises:
        InvalidPath: malformed, or a component is a symbolic link.
        FileNotFoundError: missing or not a regular file.
    """
    path = validate_relpath(rel)
    with _reading(path), _root_fd(root) as rfd:
        # O_NONBLOCK: opening a FIFO planted by user code must not block the server.
        fd = _open_beneath(rfd, str(path), os.O_RDONLY | os.O_NONBLOCK)
    info = os.fstat(fd)
    if not stat_module.S_ISREG(info.st_mode):
        os.close(fd)
        raise FileNotFoundError(errno.ENOENT, f"not a regular file: {path}", str(path))
    return fd, info.st_size


def read_bytes(root: StrPath, rel: StrPath, *, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file, at most its size when opened.

    Raises:
        InvalidPath: malformed, or a component is a symbolic link.
        FileNotFoundError: missing or not a regular file.
        FileTooLarge: larger than ``max_bytes``.
    """
    fd, size = open_file(root, rel)
    try:
        if max_bytes is not None and size > max_bytes:
            raise FileTooLarge(f"{rel}: {size} bytes, more than {max_bytes}")
        chunks: list[bytes] = []
        remaining = size
        while remaining > 0:
            chunk = os.read(fd, min(remaining, _READ_CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def stat(root: StrPath, rel: StrPath) -> os.stat_result:
    """``stat`` of a regular file, never following a link.

    Raises:
        InvalidPath: malformed, or a component is a symbolic link.
        FileNotFoundError: missing or not a regular file.
    """
    fd, _ = open_file(root, rel)
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def _open_dir(rfd: int, rel: PurePosixPath, *, create: bool, mode: int = 0o755) -> int:
    """A descriptor of folder ``rel`` (``.`` is the root), creating missing parts (``mode``,
    before the umask) if asked.

    Raises:
        InvalidPath: a component is a link.
        NotADirectoryError: a component is not a folder.
        FileNotFoundError: a component is missing and ``create`` is false.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY
    if not rel.parts:
        return os.dup(rfd)
    try:
        return _open_beneath(rfd, str(rel), flags)
    except FileNotFoundError:
        if not create:
            raise
    current = os.dup(rfd)
    try:
        for name in rel.parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, mode, dir_fd=current)
            fd = _open_beneath(current, name, flags)
            os.close(current)
            current = fd
        return current
    except BaseException:
        os.close(current)
        raise


def make_private_dir(path: StrPath) -> None:
    """Create ``path`` (and missing parents) and make it 0700, never through a link.

    Raises:
        OSError: it is a link or not a folder (``ELOOP``/``ENOTDIR``), or not ours.
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise OSError(errno.EPERM, f"{path} belongs to another user")
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def create_private_file(path: StrPath) -> None:
    """Create ``path`` as an empty 0600 file unless it exists; make an existing one 0600."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


class AtomicWriter:
    """Write a file so that readers see the old content or the whole new one, never a part.

    The bytes go to an unnamed (``O_TMPFILE``) or ``TEMP_PREFIX``-named file in the target's
    folder; :meth:`commit` syncs and renames it into place, replacing a file or a link (never
    its target). Leaving the ``with`` block without :meth:`commit` discards everything.
    """

    def __init__(
        self,
        root: StrPath,
        rel: StrPath,
        *,
        mkdirs: bool = True,
        max_bytes: int | None = None,
        mode: int = 0o644,
        dir_mode: int = 0o755,
    ) -> None:
        """Open the temporary file (``mode`` is the new file's and ``dir_mode`` that of folders
        made for it, before the umask).

        Raises:
            InvalidPath: malformed, through a link or a regular file.
            FileNotFoundError: the folder is missing and ``mkdirs`` is false.
            AccessDenied: a permission refuses it (a folder of the path is not writable).
        """
        self.path = validate_relpath(rel)
        self.size = 0
        self._max_bytes = max_bytes
        self._mode = mode
        self._temp: str | None = None
        self._done = False
        with _permitted(self.path), _root_fd(root) as rfd:
            try:
                self._dirfd = _open_dir(rfd, self.path.parent, create=mkdirs, mode=dir_mode)
            except NotADirectoryError as exc:
                raise InvalidPath(f"{self.path}: a parent is not a folder") from exc
        try:
            with _permitted(self.path):
                self._fd = self._create()
        except BaseException:
            os.close(self._dirfd)
            raise

    def _create(self) -> int:
        with contextlib.suppress(OSError):
            if not _O_TMPFILE:
                raise OSError(errno.EOPNOTSUPP, "no O_TMPFILE")
            flags = _O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC
            fd = os.open(".", flags, self._mode, dir_fd=self._dirfd)
            # Naming an O_TMPFILE file needs /proc (linkat on /proc/self/fd without privileges).
            if os.path.exists(f"/proc/self/fd/{fd}"):
                return fd
            os.close(fd)
        self._temp = TEMP_PREFIX + secrets.token_hex(8)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BASE_FLAGS
        return os.open(self._temp, flags, self._mode, dir_fd=self._dirfd)

    def write(self, data: bytes) -> None:
        """Append ``data``.

        Raises:
            FileTooLarge: the total would exceed ``max_bytes``; the writer is then aborted.
        """
        if self._max_bytes is not None and self.size + len(data) > self._max_bytes:
            self.abort()
            raise FileTooLarge(f"{self.path}: more than {self._max_bytes} bytes")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self.size += len(data)

    def commit(self) -> int:
        """Sync and move the file into place; returns its size.

        Raises:
            InvalidPath: a folder (or anything but a file or link) holds the target name.
            AccessDenied: the folder stopped being writable meanwhile.
        """
        try:
            os.fsync(self._fd)
            if self._temp is None:
                self._temp = TEMP_PREFIX + secrets.token_hex(8)
                os.link(
                    f"/proc/self/fd/{self._fd}",
                    self._temp,
                    dst_dir_fd=self._dirfd,
                    follow_symlinks=True,
                )
            try:
                with _permitted(self.path):
                    os.rename(
                        self._temp, self.path.name, src_dir_fd=self._dirfd, dst_dir_fd=self._dirfd
                    )
            except OSError as exc:
                if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise InvalidPath(f"{self.path}: a folder has this name") from exc
                raise
            self._temp = None
            os.fsync(self._dirfd)
        finally:
            self.abort()
        return self.size

    def abort(self) -> None:
        """Discard the temporary file; idempotent."""
        if self._done:
            return
        self._done = True
        os.close(self._fd)
        if self._temp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._temp, dir_fd=self._dirfd)
        os.close(self._dirfd)

    def __enter__(self) -> AtomicWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.abort()


def write_atomic(
    root: StrPath,
    rel: StrPath,
    data: bytes | Iterable[bytes],
    *,
    mkdirs: bool = True,
    max_bytes: int | None = None,
) -> int:
    """Write ``data`` (bytes or an iterable of chunks) to ``rel`` atomically; returns the size.

    Raises:
        InvalidPath: malformed, through a link or a regular file, or onto a folder.
        FileNotFoundError: the folder is missing and ``mkdirs`` is false.
        FileTooLarge: more than ``max_bytes``; nothing is left behind.
    """
    with AtomicWriter(root, rel, mkdirs=mkdirs, max_bytes=max_bytes) as writer:
        for chunk in [data] if isinstance(data, bytes | bytearray | memoryview) else data:
            writer.write(bytes(chunk))
        return writer.commit()


@_typed_permissions
def delete(root: StrPath, rel: StrPath) -> None:
    """Remove a file, or a link itself (never what it points to).

    Raises:
        InvalidPath: malformed, or a folder component is a link.
        FileNotFoundError: missing.
        IsADirectoryError: ``rel`` is a folder.
    """
    path = validate_relpath(rel)
    with _root_fd(root) as rfd:
        try:
            dirfd = _open_dir(rfd, path.parent, create=False)
        except NotADirectoryError as exc:
            raise _missing(path) from exc
    try:
        os.unlink(path.name, dir_fd=dirfd)
    finally:
        os.close(dirfd)


class Listing(list[FileEntry]):
    """The files :func:`list_files` found; ``truncated`` when a bound cut the walk short."""

    truncated: bool = False


class _Walk:
    """A breadth-first walk below a root that holds at most two descriptors at any time.

    Pending folders are kept as paths, never as open descriptors, and each is reopened from
    the root without following links (so a folder swapped for a link meanwhile is skipped):
    the walk's descriptors stay fixed however wide or deep the tree, and its memory is bounded
    by ``budget``, the number of entries it may look at before it stops with ``cut`` set.
    """

    def __init__(self, rfd: int, budget: int | None = None) -> None:
        self._rfd = rfd
        self._budget = budget
        self.cut = False

    def _open(self, rel: str) -> int | None:
        if not rel:
            return os.dup(self._rfd)
        try:
            return _open_beneath(self._rfd, rel, os.O_RDONLY | os.O_DIRECTORY)
        except InvalidPath:
            return None  # a link planted meanwhile, or a path past PATH_MAX
        except OSError:
            return None  # removed or replaced meanwhile

    def __iter__(self) -> Iterator[tuple[str, os.stat_result]]:
        pending: deque[str] = deque([""])
        seen = 0
        while pending:
            folder = pending.popleft()
            dirfd = self._open(folder)
            if dirfd is None:
                continue
            prefix = folder + "/" if folder else ""
            # A folder is read whole before anything is yielded: a consumer that stops early
            # then leaves no directory stream (or descriptor) open behind a suspended generator.
            batch: list[tuple[str, os.stat_result]] = []
            try:
                with os.scandir(dirfd) as entries:
                    for entry in entries:
                        if self._budget is not None and seen >= self._budget:
                            self.cut = True
                            break
                        seen += 1
                        try:
                            info = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue  # removed while we looked
                        batch.append((prefix + entry.name, info))
            except OSError:
                continue  # the folder went away under the scan
            finally:
                os.close(dirfd)
            for rel, info in batch:
                yield rel, info
                if stat_module.S_ISDIR(info.st_mode):
                    pending.append(rel)
            if self.cut:
                return


def _printable(rel: str) -> str:
    """``rel`` itself, or with bytes that are not UTF-8 escaped (``\\xff``): such a name
    (planted by sandboxed code) could not travel as JSON text, and must not crash a listing."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(rel).decode("utf-8", "backslashreplace")
    return rel


DEFAULT_MAX_ENTRIES = 10_000
"""Files a listing returns at most unless told otherwise; a cut listing says so."""
_SCAN_FACTOR = 10  # entries looked at per entry returned: bounds a walk through empty folders


@_typed_permissions
def list_files(root: StrPath, *, max_entries: int | None = DEFAULT_MAX_ENTRIES) -> Listing:
    """Regular files below ``root``, sorted by path: at most ``max_entries`` of them.

    Links are neither followed nor reported, whatever they point to; in-progress writes and
    FIFOs, sockets and devices are left out; names that are not UTF-8 are reported with those
    bytes escaped (``caf\\xe9.txt``), so they can be shown but not opened. The walk holds a
    fixed few descriptors whatever the tree, and looks at no more than ``_SCAN_FACTOR *
    max_entries`` entries; when either bound stops it, the listing is ``truncated``.
    ``max_entries=None`` walks everything (for trees the server wrote itself).
    """
    budget = None if max_entries is None else max_entries * _SCAN_FACTOR
    found = Listing()
    with _root_fd(root) as rfd:
        walk = _Walk(rfd, budget)
        for rel, info in walk:
            if not stat_module.S_ISREG(info.st_mode):
                continue
            if rel.rpartition("/")[2].startswith(TEMP_PREFIX):
                continue
            if max_entries is not None and len(found) >= max_entries:
                found.truncated = True
                break
            found.append(FileEntry(_printable(rel), info.st_size))
        found.truncated = found.truncated or walk.cut
    found.sort()
    return found


@_typed_permissions
def disk_usage(root: StrPath) -> int:
    """Bytes allocated below ``root`` (files, folders and links, none followed)."""
    with _root_fd(root) as rfd:
        return sum(info.st_blocks * 512 for _, info in _Walk(rfd))


# Folder operations (the E2B filesystem service): the same rules, applied to folders too.


def _parent_fd(rfd: int, path: PurePosixPath) -> int:
    try:
        return _open_dir(rfd, path.parent, create=False)
    except NotADirectoryError as exc:
        raise _missing(path) from exc


@_typed_permissions
def lstat(root: StrPath, rel: StrPath) -> os.stat_result:
    """``lstat`` of anything below ``root`` (``.`` is the root), never following a link.

    Raises:
        InvalidPath: malformed, or a folder component is a link.
        FileNotFoundError: missing.
    """
    text = os.fspath(rel)
    with _root_fd(root) as rfd:
        if text in ("", "."):
            return os.fstat(rfd)
        path = validate_relpath(text)
        dirfd = _parent_fd(rfd, path)
    try:
        return os.stat(path.name, dir_fd=dirfd, follow_symlinks=False)
    finally:
        os.close(dirfd)


@_typed_permissions
def list_dir(
    root: StrPath, rel: StrPath, *, depth: int, max_entries: int
) -> list[tuple[str, os.stat_result]]:
    """Entries of folder ``rel`` (``.`` is the root) down to ``depth`` levels, links unfollowed.

    Returns ``(path relative to root, lstat)`` pairs, at most ``max_entries`` of them.

    Raises:
        InvalidPath: malformed, or a component is a link.
        NotADirectoryError: ``rel`` is not a folder.
        FileNotFoundError: missing.
    """
    text = os.fspath(rel)
    base = PurePosixPath() if text in ("", ".") else validate_relpath(text)
    found: list[tuple[str, os.stat_result]] = []
    with _root_fd(root) as rfd:
        stack = [(_open_dir(rfd, base, create=False), base, 1)]
    try:
        while stack and len(found) < max_entries:
            dirfd, prefix, level = stack.pop()
            try:
                with os.scandir(dirfd) as entries:
                    for entry in entries:
                        if entry.name.startswith(TEMP_PREFIX):
                            continue
                        try:
                            info = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue  # removed while we looked
                        found.append((str(prefix / entry.name), info))
                        if len(found) >= max_entries:
                            break
                        if level < depth and stat_module.S_ISDIR(info.st_mode):
                            try:
                                sub = _open_beneath(dirfd, entry.name, os.O_RDONLY | os.O_DIRECTORY)
                            except (OSError, InvalidPath):
                                continue  # swapped for a link or removed meanwhile
                            stack.append((sub, prefix / entry.name, level + 1))
            finally:
                os.close(dirfd)
    finally:
        for dirfd, _, _ in stack:
            os.close(dirfd)
    return found


@_typed_permissions
def make_dir(root: StrPath, rel: StrPath) -> bool:
    """Create folder ``rel`` and its missing parents; False when it already existed.

    Raises:
        InvalidPath: malformed, a component is a link, or a file holds one of the names.
    """
    path = validate_relpath(rel)
    with _root_fd(root) as rfd:
        try:
            os.close(_open_dir(rfd, path, create=False))
            return False
        except FileNotFoundError:
            pass
        except NotADirectoryError as exc:
            raise InvalidPath(f"{path}: a file has this name") from exc
        try:
            os.close(_open_dir(rfd, path, create=True))
        except NotADirectoryError as exc:
            raise InvalidPath(f"{path}: a file has this name") from exc
    return True


@_typed_permissions
def move(root: StrPath, source: StrPath, destination: StrPath) -> None:
    """Rename ``source`` to ``destination`` (creating its folder), a link as itself.

    Raises:
        InvalidPath: malformed, a folder component is a link, or a folder into itself.
        FileNotFoundError: ``source`` is missing.
    """
    src, dst = validate_relpath(source), validate_relpath(destination)
    if dst.parts[: len(src.parts)] == src.parts:
        raise InvalidPath(f"{dst}: cannot move a folder into itself")
    with _root_fd(root) as rfd:
        src_dir = _parent_fd(rfd, src)
        try:
            try:
                dst_dir = _open_dir(rfd, dst.parent, create=True)
            except NotADirectoryError as exc:
                raise InvalidPath(f"{dst}: a parent is not a folder") from exc
            try:
                os.rename(src.name, dst.name, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
            except OSError as exc:
                if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise InvalidPath(f"{dst}: cannot replace what has this name") from exc
                raise
            finally:
                os.close(dst_dir)
        finally:
            os.close(src_dir)


@_typed_permissions
def remove_tree(root: StrPath, rel: StrPath) -> None:
    """Remove a file, a link itself, or a folder with everything in it (links unfollowed).

    Raises:
        InvalidPath: malformed, or a folder component is a link.
        FileNotFoundError: missing.
    """
    path = validate_relpath(rel)
    with _root_fd(root) as rfd:
        dirfd = _parent_fd(rfd, path)
    try:
        info = os.stat(path.name, dir_fd=dirfd, follow_symlinks=False)
        if stat_module.S_ISDIR(info.st_mode):
            # rmtree with dir_fd works on descriptors and never follows a link.
            shutil.rmtree(path.name, dir_fd=dirfd)
        else:
            os.unlink(path.name, dir_fd=dirfd)
    finally:
        os.close(dirfd)


async def read_chunks(fd: int, size: int, chunk_size: int) -> AsyncIterator[bytes]:
    """Exactly ``size`` bytes of ``fd``, read in a worker thread; closes ``fd`` however the
    stream ends (for downloads that must not hold a whole file in memory).

    Raises:
        OSError: the file shrank while it was read (the client sees a short body).
    """
    try:
        remaining = size
        while remaining > 0:
            chunk = await anyio.to_thread.run_sync(os.read, fd, min(chunk_size, remaining))
            if not chunk:
                raise OSError(f"file shrank by {remaining} bytes while being sent")
            remaining -= len(chunk)
            yield chunk
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)

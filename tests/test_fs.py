"""Confinement of corral._fs: no operation ever leaves the root through a link or ``..``."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from corral import _fs
from corral.errors import AccessDenied, FileTooLarge, InvalidPath


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    folder.mkdir()
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    sibling = tmp_path / "root2"
    sibling.mkdir()
    (sibling / "secret.txt").write_bytes(b"secret")
    return sibling


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run each test with openat2 and with the O_NOFOLLOW walk that replaces it."""
    if request.param == "walk":
        monkeypatch.setattr(_fs._openat2, "available", False)
    elif not _fs._openat2.available:
        pytest.skip("this kernel has no openat2")
    return str(request.param)


@pytest.mark.parametrize("text", ["", ".", "/etc/passwd", "../x", "a/../../x", "a/..", "a\0b", "/"])
def test_validate_relpath_rejects(text: str) -> None:
    with pytest.raises(InvalidPath):
        _fs.validate_relpath(text)


def test_validate_relpath_normalises_dots_and_slashes() -> None:
    assert str(_fs.validate_relpath("./a//b/./c.txt")) == "a/b/c.txt"
    assert str(_fs.validate_relpath("back\\slash")) == "back\\slash"


@pytest.mark.usefixtures("resolver")
def test_round_trip_list_stat_delete(root: Path) -> None:
    assert _fs.write_atomic(root, "sub/dir/a.csv", b"1,2\n") == 4
    assert _fs.write_atomic(root, "b.txt", iter([b"he", b"llo"])) == 5
    assert _fs.read_bytes(root, "sub/dir/a.csv") == b"1,2\n"
    assert _fs.list_files(root) == [("b.txt", 5), ("sub/dir/a.csv", 4)]
    assert _fs.stat(root, "b.txt").st_size == 5
    assert _fs.disk_usage(root) > 0
    _fs.delete(root, "b.txt")
    with pytest.raises(FileNotFoundError):
        _fs.read_bytes(root, "b.txt")
    with pytest.raises(FileNotFoundError):
        _fs.delete(root, "b.txt")
    with pytest.raises(IsADirectoryError):
        _fs.delete(root, "sub")


@pytest.mark.usefixtures("resolver")
def test_links_to_outside_are_never_followed(root: Path, outside: Path) -> None:
    (root / "passwd").symlink_to("/etc/passwd")
    (root / "sibling").symlink_to(outside)
    (root / "broken").symlink_to(root / "nowhere")
    (root / "inside").symlink_to("real.txt")
    (root / "real.txt").write_bytes(b"real")
    for rel in ("passwd", "sibling/secret.txt", "broken", "inside"):
        with pytest.raises(InvalidPath):
            _fs.read_bytes(root, rel)
    with pytest.raises(InvalidPath):
        _fs.write_atomic(root, "sibling/new.txt", b"x")
    with pytest.raises(InvalidPath):
        _fs.delete(root, "sibling/secret.txt")
    assert not (outside / "new.txt").exists()
    assert (outside / "secret.txt").read_bytes() == b"secret"
    assert _fs.list_files(root) == [("real.txt", 4)]


@pytest.mark.usefixtures("resolver")
def test_writing_onto_a_link_replaces_the_link_not_its_target(root: Path, outside: Path) -> None:
    (root / "s").symlink_to(outside / "secret.txt")
    _fs.write_atomic(root, "s", b"mine")
    assert (outside / "secret.txt").read_bytes() == b"secret"
    assert not (root / "s").is_symlink()
    assert (root / "s").read_bytes() == b"mine"
    (root / "l").symlink_to(outside / "secret.txt")
    _fs.delete(root, "l")
    assert (outside / "secret.txt").exists()
    assert not (root / "l").exists()


@pytest.mark.usefixtures("resolver")
def test_non_regular_files_read_as_missing(root: Path) -> None:
    os.mkfifo(root / "fifo")
    (root / "dir").mkdir()
    (root / "file").write_bytes(b"f")
    for rel in ("fifo", "dir", "file/under", "nope"):
        with pytest.raises(FileNotFoundError):
            _fs.read_bytes(root, rel)
    assert _fs.list_files(root) == [("file", 1)]


@pytest.mark.usefixtures("resolver")
def test_writes_through_a_file_or_onto_a_folder_are_invalid(root: Path) -> None:
    (root / "file").write_bytes(b"f")
    (root / "dir").mkdir()
    with pytest.raises(InvalidPath):
        _fs.write_atomic(root, "file/under", b"x")
    with pytest.raises(InvalidPath):
        _fs.write_atomic(root, "dir", b"x")
    with pytest.raises(FileNotFoundError):
        _fs.write_atomic(root, "missing/x", b"x", mkdirs=False)
    assert _fs.list_files(root) == [("file", 1)]
    assert sorted(p.name for p in root.iterdir()) == ["dir", "file"]


@pytest.mark.usefixtures("resolver")
def test_failed_write_keeps_the_old_file_and_leaves_nothing(root: Path) -> None:
    _fs.write_atomic(root, "a.bin", b"old")

    def chunks() -> Iterator[bytes]:
        yield b"new"
        raise RuntimeError("client went away")

    with pytest.raises(RuntimeError):
        _fs.write_atomic(root, "a.bin", chunks())
    with pytest.raises(FileTooLarge):
        _fs.write_atomic(root, "a.bin", [b"1234", b"5678"], max_bytes=6)
    assert _fs.read_bytes(root, "a.bin") == b"old"
    assert [p.name for p in root.iterdir()] == ["a.bin"]
    with pytest.raises(FileTooLarge):
        _fs.read_bytes(root, "a.bin", max_bytes=2)


def test_named_temporary_files_are_hidden_and_removed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_fs, "_O_TMPFILE", 0)
    with _fs.AtomicWriter(root, "x.txt") as writer:
        writer.write(b"partial")
        assert _fs.list_files(root) == []
        assert any(p.name.startswith(_fs.TEMP_PREFIX) for p in root.iterdir())
    assert list(root.iterdir()) == []
    with _fs.AtomicWriter(root, "x.txt") as writer:
        writer.write(b"whole")
        writer.commit()
    assert [p.name for p in root.iterdir()] == ["x.txt"]


@pytest.mark.usefixtures("resolver")
def test_listing_never_descends_into_linked_folders(root: Path, outside: Path) -> None:
    (root / "d").mkdir()
    (root / "d" / "in.txt").write_bytes(b"in")
    (root / "d" / "up").symlink_to(root)
    (root / "out").symlink_to(outside)
    assert _fs.list_files(root) == [("d/in.txt", 2)]
    assert _fs.disk_usage(root) < 1024 * 1024


@pytest.mark.usefixtures("resolver")
def test_folder_swapped_for_a_link_after_validation(root: Path, outside: Path) -> None:
    (root / "d").mkdir()
    (root / "d" / "secret.txt").write_bytes(b"mine")
    rel = _fs.validate_relpath("d/secret.txt")
    (root / "d" / "secret.txt").unlink()
    (root / "d").rmdir()
    (root / "d").symlink_to(outside)
    with pytest.raises(InvalidPath):
        _fs.read_bytes(root, rel)
    with pytest.raises(InvalidPath):
        _fs.write_atomic(root, rel, b"x")
    assert (outside / "secret.txt").read_bytes() == b"secret"


@pytest.mark.usefixtures("resolver")
def test_racing_swaps_never_expose_outside_bytes(root: Path, outside: Path) -> None:
    """A thread flips ``d`` between a folder and a link to outside while we read and write."""
    (root / "d").mkdir()
    (root / "d" / "secret.txt").write_bytes(b"mine")
    (root / "l").symlink_to(outside)
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            os.rename(root / "d", root / "t")
            os.rename(root / "l", root / "d")
            os.rename(root / "d", root / "l")
            os.rename(root / "t", root / "d")

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        for _ in range(2000):
            with contextlib.suppress(InvalidPath, FileNotFoundError):
                assert _fs.read_bytes(root, "d/secret.txt") == b"mine"
            with contextlib.suppress(InvalidPath, FileNotFoundError):
                _fs.write_atomic(root, "d/new.txt", b"x", mkdirs=False)
            listed = dict(_fs.list_files(root))
            assert listed.get("d/secret.txt", 4) == 4
            assert listed.get("t/secret.txt", 4) == 4
    finally:
        stop.set()
        flipper.join()
    assert (outside / "secret.txt").read_bytes() == b"secret"
    assert not (outside / "new.txt").exists()


# Folder operations (the E2B filesystem service).


def test_folder_operations_round_trip(root: Path, resolver: str) -> None:
    assert _fs.make_dir(root, "a/b") is True
    assert _fs.make_dir(root, "a/b") is False
    _fs.write_atomic(root, "a/b/f.txt", b"x")
    found = dict(_fs.list_dir(root, "a", depth=2, max_entries=100))
    assert sorted(found) == ["a/b", "a/b/f.txt"]
    assert sorted(p for p, _ in _fs.list_dir(root, ".", depth=1, max_entries=100)) == ["a"]
    assert len(_fs.list_dir(root, ".", depth=5, max_entries=2)) == 2
    _fs.move(root, "a/b/f.txt", "c/g.txt")
    assert (root / "c" / "g.txt").read_bytes() == b"x"
    assert _fs.lstat(root, "c/g.txt").st_size == 1
    _fs.remove_tree(root, "a")
    assert not (root / "a").exists()
    with pytest.raises(FileNotFoundError):
        _fs.lstat(root, "a")
    with pytest.raises(InvalidPath):
        _fs.move(root, "c", "c/inside")


def test_folder_operations_never_follow_links(root: Path, outside: Path, resolver: str) -> None:
    (root / "out").symlink_to(outside)
    (root / "file").symlink_to(outside / "secret.txt")
    # A link is reported as a link, never entered.
    listed = dict(_fs.list_dir(root, ".", depth=3, max_entries=100))
    assert sorted(listed) == ["file", "out"]
    assert os.path.islink(root / "out")
    assert _fs.lstat(root, "out").st_mode & 0o170000 == 0o120000
    for action in (
        lambda: _fs.list_dir(root, "out", depth=1, max_entries=10),
        lambda: _fs.make_dir(root, "out/new"),
        lambda: _fs.move(root, "out/secret.txt", "stolen.txt"),
        lambda: _fs.move(root, "file", "out/moved"),
        lambda: _fs.remove_tree(root, "out/secret.txt"),
        lambda: _fs.lstat(root, "out/secret.txt"),
    ):
        with pytest.raises(InvalidPath):
            action()
    # Removing a link removes the link itself, whatever it points to.
    _fs.remove_tree(root, "out")
    _fs.remove_tree(root, "file")
    assert (outside / "secret.txt").read_bytes() == b"secret"
    assert sorted(os.listdir(root)) == []


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("shape", ["wide", "deep"])
def test_listing_holds_a_fixed_few_descriptors(root: Path, shape: str) -> None:
    if shape == "wide":
        for i in range(3000):
            (root / "v" / str(i)).mkdir(parents=True)
        (root / "v" / "2999" / "last.txt").write_bytes(b"x")
        expected = "v/2999/last.txt"
    else:
        deep = root.joinpath(*["d"] * 400)  # 800 bytes of path: well within PATH_MAX
        deep.mkdir(parents=True)
        (deep / "bottom.txt").write_bytes(b"x")
        expected = "/".join(["d"] * 400) + "/bottom.txt"
    before = _open_fds()
    most = before
    with _fs._root_fd(root) as rfd:
        for _ in _fs._Walk(rfd):
            most = max(most, _open_fds())
    assert most - before <= 4  # the root, one folder and scandir's copy of it, plus listdir's
    listing = _fs.list_files(root)
    assert [f.path for f in listing] == [expected]
    assert not listing.truncated
    assert _open_fds() == before


def test_a_listing_past_its_cap_is_cut_and_says_so(root: Path) -> None:
    for i in range(30):
        (root / f"f{i:02}").write_bytes(b"x")
    listing = _fs.list_files(root, max_entries=10)
    assert (len(listing), listing.truncated) == (10, True)
    whole = _fs.list_files(root, max_entries=30)
    assert (len(whole), whole.truncated) == (30, False)
    assert whole == sorted(whole)


def test_empty_folders_count_against_the_walk_budget(root: Path) -> None:
    for i in range(200):
        (root / f"empty{i:03}").mkdir()
    (root / "zz").mkdir()
    (root / "zz" / "file").write_bytes(b"x")
    cut = _fs.list_files(root, max_entries=5)  # looks at 50 entries at most
    assert cut.truncated
    assert list(cut) == []
    assert [f.path for f in _fs.list_files(root, max_entries=100)] == ["zz/file"]


def test_names_that_are_not_utf8_are_listed_escaped(root: Path) -> None:
    (root / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"x")
    (root / "ok.txt").write_bytes(b"y")
    listing = _fs.list_files(root)
    assert [f.path for f in listing] == ["caf\\xe9.txt", "ok.txt"]
    assert all(f.path.encode("utf-8") for f in listing)  # JSON-safe text


# permissions the sandboxed code took away -----------------------------------------------------

T = TypeVar("T")
NOBODY = 65534  # an unprivileged uid: the server works as the sandbox's user, never as root


@pytest.fixture
def session_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder the unprivileged user owns, and the ``/proc/self/fd`` root the engine's
    session files give ``corral._fs`` (its ancestors need not be reachable by that user)."""
    folder = tmp_path / "session"
    folder.mkdir()
    os.chown(folder, NOBODY, NOBODY)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield folder, f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _as_user(action: Callable[[], T]) -> T:
    from corral.sandbox import as_fs_owner

    return as_fs_owner(NOBODY, NOBODY, action)


def test_a_folder_made_unreadable_is_access_denied_never_permission_error(
    session_root: tuple[Path, str], resolver: str
) -> None:
    folder, root = session_root
    _as_user(lambda: _fs.write_atomic(root, "d/f.txt", b"x"))
    _as_user(lambda: _fs.make_dir(root, "d/sub"))
    os.chmod(folder / "d", 0)  # what `os.chmod('d', 0)` in the sandbox does
    denied: list[Callable[[], object]] = [
        lambda: _fs.write_atomic(root, "d/new.txt", b"x"),
        lambda: _fs.delete(root, "d/f.txt"),
        lambda: _fs.lstat(root, "d/f.txt"),
        lambda: _fs.list_dir(root, "d", depth=1, max_entries=10),
        lambda: _fs.make_dir(root, "d/other"),
        lambda: _fs.move(root, "d/f.txt", "g.txt"),
        lambda: _fs.remove_tree(root, "d"),
    ]
    for action in denied:
        with pytest.raises(AccessDenied, match="permission denied"):
            _as_user(action)
    for read in (_fs.open_file, _fs.read_bytes, _fs.stat):
        with pytest.raises(FileNotFoundError):
            _as_user(functools.partial(read, root, "d/f.txt"))
    assert _as_user(lambda: _fs.list_files(root)) == []  # an unreadable folder is skipped
    assert _as_user(lambda: _fs.lstat(root, "d")).st_mode & 0o777 == 0
    os.chmod(folder, 0)  # and the session folder itself
    for action in (lambda: _fs.list_files(root), lambda: _fs.write_atomic(root, "x", b"x")):
        with pytest.raises(AccessDenied):
            _as_user(action)
    with pytest.raises(FileNotFoundError):
        _as_user(lambda: _fs.read_bytes(root, "x"))

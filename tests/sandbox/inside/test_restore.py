"""What a case server puts back between two cases: in process on a scratch folder, then from a
real case through the engine's case servers (``Engine.run_cases``)."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from corral.engine import Engine
from corral.sandbox.inside import _restore
from tests.sandbox.inside.casekit import attack_then_observe

pytestmark = [pytest.mark.anyio]

# A default POSIX ACL (owner rwx, group and others nothing): every file made in the folder
# afterwards would be 0600 whatever the umask.
PRIVATE_DEFAULT_ACL = struct.pack(
    "<I" + "HHI" * 3, 2, 0x01, 7, 0xFFFFFFFF, 0x04, 0, 0xFFFFFFFF, 0x20, 0, 0xFFFFFFFF
)


def _tree(root: Path) -> list[tuple[str, int]]:
    return sorted((str(path.relative_to(root)), path.lstat().st_mode) for path in root.rglob("*"))


def _attributes(path: Path) -> tuple[object, ...]:
    info = path.lstat()
    xattrs = sorted((n, os.getxattr(path, n)) for n in os.listxattr(path))
    return (info.st_mode, info.st_uid, info.st_gid, info.st_atime_ns, info.st_mtime_ns, xattrs)


def test_restore_puts_a_folder_back_as_it_was(tmp_path: Path) -> None:
    root = tmp_path / "work"
    (root / "kept" / "inner").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    baseline = _restore.snapshot((str(root),))
    before = _tree(root)
    (root / "kept" / "inner" / "new.txt").write_text("x")
    (root / "made" / "deeper").mkdir(parents=True)
    (root / "made" / "deeper" / "f").write_text("y")
    (root / "link").symlink_to(outside)
    (root / "kept" / "link").symlink_to(outside / "precious")
    (root / "kept").chmod(0o700)
    os.mkfifo(root / "fifo")
    assert _restore.restore(baseline)
    assert _tree(root) == before
    assert (outside / "precious").read_text() == "keep me"  # links are removed, not followed


def test_restore_puts_back_modes_owners_xattrs_and_times(tmp_path: Path) -> None:
    root = tmp_path / "work"
    (root / "kept").mkdir(parents=True)
    os.setxattr(root / "kept", "user.recorded", b"as it was")
    folders = (root, root / "kept")
    baseline = _restore.snapshot((str(root),))
    before = [_attributes(folder) for folder in folders]
    for folder in folders:
        os.setxattr(folder, "user.planted", b"for the next case")
        os.setxattr(folder, "system.posix_acl_default", PRIVATE_DEFAULT_ACL)
        os.chown(folder, 65534, 65534)  # a root test can do what no case can
        os.utime(folder, ns=(1, 2))
    os.setxattr(root / "kept", "user.recorded", b"changed")
    root.chmod(0o555)
    (root / "kept").chmod(0)
    assert _restore.restore(baseline)
    assert [_attributes(folder) for folder in folders] == before


def test_restore_fails_when_a_folder_cannot_be_restored(tmp_path: Path) -> None:
    root = tmp_path / "work"
    (root / "kept").mkdir(parents=True)
    baseline = _restore.snapshot((str(root),))
    (root / "kept").rmdir()
    assert not _restore.restore(baseline)  # a kept folder is gone
    (root / "kept").mkdir()
    assert _restore.restore(baseline)
    # (A folder the case made unremovable, chmod 0, is tested in the sandbox, where the
    # server is not root: tests/http/test_sandboxfusion_batch.py.)


def test_a_restore_past_its_time_gives_up(tmp_path: Path) -> None:
    # It runs after the case gave back its slot: a case that left more than the server may
    # wipe in RESTORE_SECONDS costs its server, not CPU that no slot holds.
    root = tmp_path / "work"
    root.mkdir()
    baseline = _restore.snapshot((str(root),))
    (root / "made" / "deeper").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (root / "made" / "deeper" / name).write_text(name)
    assert not _restore.restore(baseline, seconds=-1.0)  # out of time from the start
    assert (root / "made").exists()  # given up on, not half-pretended
    assert _restore.restore(baseline)  # within its time, a made tree goes entirely
    assert list(root.iterdir()) == []


# from a real case ---------------------------------------------------------------------------

FOLDERS = ("/work", "/tmp", "/dev/shm", "/tmp/matplotlib")  # inside the sandbox
OBSERVE_FOLDERS = (
    "{p: [os.stat(p).st_mode, os.stat(p).st_uid, os.stat(p).st_gid,"
    " os.stat(p).st_atime_ns, os.stat(p).st_mtime_ns,"
    " sorted((n, os.getxattr(p, n).hex()) for n in os.listxattr(p))]"
    f" for p in {FOLDERS!r}}}"
)
"""Each folder's mode, owner, times and extended attributes, as a later case would see them."""

ATTEMPT = (
    "did = []\n"
    "def attempt(call, *args, **kwargs):\n"
    "    try:\n"
    "        call(*args, **kwargs)\n"
    "        did.append('ok')\n"
    "    except OSError as exc:\n"
    "        did.append(exc.errno)\n"
    f"PATHS = {FOLDERS!r}\n"
)
"""Defines ``attempt``, which runs a call and notes in ``did`` whether it worked."""

FOLDER_ATTACKS = {
    # chmod 0555 /work used to fail every later case with PermissionError.
    "modes": "for p, m in zip(PATHS, (0o555, 0o700, 0, 0)):\n    attempt(os.chmod, p, m)",
    "times": "for p in PATHS:\n    attempt(os.utime, p, ns=(1, 2))",
    "user xattrs": "for p in PATHS:\n    attempt(os.setxattr, p, 'user.corral', b'next case')",
    "default ACLs": (
        "for p in PATHS:\n"
        f"    attempt(os.setxattr, p, 'system.posix_acl_default', {PRIVATE_DEFAULT_ACL!r})"
    ),
    "owners": (
        "for p in PATHS:\n"
        "    for ids in ((0, 0), (65534, 65534), (1001, 1001), (-1, 0)):\n"
        "        attempt(os.chown, p, *ids)"
    ),
}
REFUSED = {"owners"}
"""Attacks the kernel refuses outright: a case's user namespace maps one uid and one gid."""


@pytest.mark.isolation
@pytest.mark.parametrize("name", FOLDER_ATTACKS)
async def test_the_next_case_finds_the_folders_as_they_were(one_lane: Engine, name: str) -> None:
    seen = await attack_then_observe(one_lane, OBSERVE_FOLDERS, ATTEMPT + FOLDER_ATTACKS[name])
    did = seen[0].attack
    if name == "user xattrs" and set(did) == {errno.EOPNOTSUPP}:
        pytest.skip("this kernel's tmpfs keeps no user xattrs (Linux 6.6 added them)")
    if name in REFUSED:
        assert set(did) <= {errno.EINVAL, errno.EPERM}, did
    else:
        assert set(did) == {"ok"}, did
    # The same server each time: it put the folders back rather than give up.
    assert [s.server for s in seen] == [seen[0].server] * 3
    assert [s.observed for s in seen[1:]] == [seen[0].observed] * 2


@pytest.mark.isolation
async def test_a_case_after_a_default_acl_makes_its_files_as_a_fresh_run(
    one_lane: Engine,
) -> None:
    made = "open('/work/made', 'w').close() or oct(os.stat('/work/made').st_mode)"
    attack = f"os.setxattr('/work', 'system.posix_acl_default', {PRIVATE_DEFAULT_ACL!r})"
    seen = await attack_then_observe(one_lane, made, attack)
    assert [s.observed for s in seen] == ["0o100644"] * 3

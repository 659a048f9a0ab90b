"""Sessions that pause, resume, snapshot and outlive their engine, with real workers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from corral._limits import Limits
from corral.engine import Engine, Session
from corral.errors import SnapshotError, SnapshotNotFound
from corral.sandbox.inside._keep import _MAX_CHUNK

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

LIMITS = Limits(timeout=20)
BIG = _MAX_CHUNK + (1 << 20)
BUSY = (
    "import threading\ndef spin():\n    while True: pass\n"
    "threading.Thread(target=spin, daemon=True).start()"
)
STATE = (
    "import math, json as js\n"
    "x = 41\n"
    "def f(): return x + 1\n"
    "class Point:\n    def norm(self): return math.hypot(3, 4) + x\n"
    "data = bytes(1000)\n"
    "import threading; lock = threading.Lock()\n"
    "open('kept.txt', 'w').write('hello')\n"
)


@pytest.fixture(scope="module")
async def paused_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("paused")


@pytest.fixture(scope="module")
async def real_engine(paused_dir: Path) -> AsyncIterator[Engine]:
    async with Engine(capacity=2, limits=LIMITS, paused_dir=paused_dir) as started:
        yield started


def _largest_file(folder: Path) -> int:
    return max(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _how(session: Session) -> str | None:
    return session.paused  # read again (mypy would keep an earlier narrowing)


def _can_freeze(session: Session) -> bool:
    cgroup = session._interpreter.holder.cgroup
    return cgroup is not None and cgroup.can_freeze()


async def _cpu_while(paused: Session, running: Session, ns: int) -> int:
    """CPU ``paused`` used while ``running`` (spinning) used ``ns`` of it."""
    before, start = paused.cpu_ns(), running.cpu_ns()
    with anyio.fail_after(20):
        while running.cpu_ns() - start < ns:  # noqa: ASYNC110 - CPU time has no event
            await anyio.sleep(0.01)
    return paused.cpu_ns() - before


async def test_full_pause_freezes_a_busy_loop_and_resumes_it(real_engine: Engine) -> None:
    async with await real_engine.open_session() as paused, await real_engine.open_session() as busy:
        if not _can_freeze(paused):
            pytest.skip("no freezer cgroup here (v1 freezer or v2 cgroup.freeze)")
        for session in (paused, busy):
            assert (await session.run(BUSY + "\nx = 7")).outcome == "ok"
        assert await paused.pause("full") == "full"
        assert paused.paused == "full"
        assert paused.pause_state.frozen
        assert await _cpu_while(paused, busy, 300_000_000) == 0
        result = await paused.run("x * 6")  # the next operation resumes it
        assert result.result == {"text/plain": "42"}
        assert _how(paused) is None
        assert await _cpu_while(busy, paused, 100_000_000) > 0  # spinning again


async def test_three_paused_sessions_at_capacity_two_hold_nothing(real_engine: Engine) -> None:
    sessions = [await real_engine.open_session() for _ in range(3)]
    try:
        for session in sessions:
            assert (await session.run(BUSY)).outcome == "ok"
            await session.pause("full")
        assert real_engine.statistics().running == 0
        results = [await real_engine.run("1 + 1") for _ in range(3)]
        assert [r.outcome for r in results] == ["ok"] * 3
        async with await real_engine.open_session() as fourth:
            assert (await fourth.run("2 + 2")).result == {"text/plain": "4"}
    finally:
        for session in sessions:
            await session.close()


async def test_full_pause_to_disk_keeps_globals_imports_and_files(
    real_engine: Engine, paused_dir: Path
) -> None:
    async with await real_engine.open_session() as session:
        assert (await session.run(STATE)).outcome == "ok"
        # Larger than one part of a saved state: written as two files, joined again.
        big = await session.run(f"big = b'x' * {BIG}")
        assert big.outcome == "ok"
        assert await session.pause("full", to_disk=True) == "full"
        assert session.pause_state.entry is not None
        entry = paused_dir / "v1" / "paused" / session.pause_state.entry
        assert (entry / "state.bin").stat().st_mode & 0o777 == 0o600
        assert entry.stat().st_mode & 0o777 == 0o700
        assert "lock" in session.pause_state.lost  # named, with why
        result = await session.run("x += 1\nf(), Point().norm(), js.dumps(len(data)), math.pi")
        assert result.result == {"text/plain": "(43, 47.0, '1000', 3.141592653589793)"}
        assert (await session.get_file("kept.txt")) == b"hello"
        assert "lock" in session.pause_state.lost
        size = await session.run("len(big)")
        assert size.result == {"text/plain": str(BIG)}
        assert not entry.exists()  # resumed: the entry is gone
        listing = await session.list_files()
        assert [e.path for e in listing] == ["kept.txt"]


async def test_filesystem_pause_keeps_files_and_starts_a_fresh_interpreter(
    real_engine: Engine,
) -> None:
    async with await real_engine.open_session() as session:
        assert (await session.run(STATE)).outcome == "ok"
        assert await session.pause("filesystem") == "filesystem"
        assert session.background_processes() == 0
        assert session.cpu_ns() == 0
        result = await session.run("open('kept.txt').read(), 'x' in globals()")
        assert result.result == {"text/plain": "('hello', False)"}


async def test_snapshots_start_independent_copies_and_the_source_runs_on(
    real_engine: Engine,
) -> None:
    async with await real_engine.open_session(tenant="alice") as source:
        assert (await source.run(STATE)).outcome == "ok"
        meta = await source.snapshot("full", name="base")
        assert meta.mode == "full"
        assert meta.name == "base"
        assert "lock" in meta.lost
        assert [m.id for m in real_engine.paused.snapshots("alice")] == [meta.id]
        assert real_engine.paused.snapshots("bob") == []
        with pytest.raises(SnapshotNotFound):
            await real_engine.open_session(tenant="bob", snapshot=meta.id)
        first = await real_engine.open_session(tenant="alice", snapshot=meta.id)
        second = await real_engine.open_session(tenant="alice", snapshot=meta.id)
        async with first, second:
            await first.run("x = 100\nopen('kept.txt', 'w').write('first')")
            assert (await second.run("f()")).result == {"text/plain": "42"}
            assert await second.get_file("kept.txt") == b"hello"
            assert (await first.run("f()")).result == {"text/plain": "101"}
        assert (await source.run("f()")).result == {"text/plain": "42"}
        files_only = await source.snapshot("filesystem")
        async with await real_engine.open_session(tenant="alice", snapshot=files_only.id) as s:
            result = await s.run("open('kept.txt').read(), 'x' in globals()")
            assert result.result == {"text/plain": "('hello', False)"}
        assert real_engine.paused.delete_snapshot(meta.id, "bob") is False
        assert real_engine.paused.delete_snapshot(meta.id, "alice") is True
        with pytest.raises(SnapshotNotFound):
            await real_engine.open_session(tenant="alice", snapshot=meta.id)


async def test_a_corrupt_or_foreign_snapshot_is_a_clear_error(
    real_engine: Engine, paused_dir: Path
) -> None:
    async with await real_engine.open_session(tenant="alice") as source:
        await source.run("open('a.txt', 'w').write('a')")
        corrupt = await source.snapshot("filesystem")
        foreign = await source.snapshot("filesystem")
        broken_tar = await source.snapshot("filesystem")
    folder = paused_dir / "v1" / "snapshots"
    (folder / corrupt.id / "meta.json").write_bytes(b"\x00not json")
    meta = json.loads((folder / foreign.id / "meta.json").read_text())
    (folder / foreign.id / "meta.json").write_text(json.dumps({**meta, "format": 99}))
    (folder / broken_tar.id / "files.tar").write_bytes(b"garbage" * 100)
    with pytest.raises(SnapshotError, match="corrupt"):
        await real_engine.open_session(tenant="alice", snapshot=corrupt.id)
    with pytest.raises(SnapshotError, match="format"):
        await real_engine.open_session(tenant="alice", snapshot=foreign.id)
    with pytest.raises(SnapshotError, match="files"):
        await real_engine.open_session(tenant="alice", snapshot=broken_tar.id)
    assert real_engine.paused.delete_snapshot(broken_tar.id, "alice")
    async with await real_engine.open_session() as fine:  # the engine goes on
        assert (await fine.run("1")).outcome == "ok"


async def test_paused_sessions_past_their_quota_or_ttl_are_closed_oldest_first(
    real_engine: Engine,
) -> None:
    manager = real_engine.paused
    sessions = [await real_engine.open_session(tenant="quota") for _ in range(3)]
    for session in sessions:
        await session.pause("full")
    manager.max_paused = 2
    try:
        await manager.expire_paused()
        assert [s.closed for s in sessions] == [True, False, False]
        manager.paused_ttl = 0.0
        await manager.expire_paused()
        assert all(s.closed for s in sessions)
    finally:
        manager.max_paused, manager.paused_ttl = 64, 7 * 24 * 3600.0
        for session in sessions:
            await session.close()


async def test_sessions_outlive_their_engine_and_a_corrupt_one_stops_nothing(
    tmp_path: Path,
) -> None:
    async with Engine(capacity=2, limits=LIMITS, paused_dir=tmp_path) as first:
        kept = await first.open_session(tenant="alice")
        assert (await kept.run(STATE)).outcome == "ok"
        files_only = await first.open_session(tenant="alice")
        await files_only.run("open('f.txt', 'w').write('f')")
        await files_only.pause("filesystem")
        broken = await first.open_session()
        await broken.pause("filesystem")
        kept_id, files_id = kept.id, files_only.id
        entry = tmp_path / "v1" / "paused" / str(broken.pause_state.entry)
        assert await first.paused.pause_all(5.0) == {kept_id: "full"}
    (entry / "meta.json").write_text("{}")
    async with Engine(capacity=2, limits=LIMITS, paused_dir=tmp_path) as second:
        assert entry.name in second.paused.unreadable
        session = second.get_session(kept_id)
        assert session.paused == "full"
        assert session.tenant == "alice"
        result = await session.run("f(), Point().norm(), open('kept.txt').read()")
        assert result.result == {"text/plain": "(42, 46.0, 'hello')"}
        assert "lock" in session.pause_state.lost
        other = second.get_session(files_id)
        assert other.paused == "filesystem"
        assert (await other.get_file("f.txt")) == b"f"
        await session.close()
        await other.close()
        assert not (tmp_path / "v1" / "paused" / kept_id).exists()  # closed: gone from disk


async def test_an_idle_session_pauses_when_the_engine_says_so(real_engine: Engine) -> None:
    manager = real_engine.paused
    async with await real_engine.open_session() as session:
        await session.run("x = 5")
        manager.idle_action = "pause"
        try:
            session.last_used -= real_engine.session_idle_timeout + 1
            await manager.expire_idle()
            assert _how(session) == "full"
            assert not session.closed
        finally:
            manager.idle_action = "close"
        assert (await session.run("x")).result == {"text/plain": "5"}


async def test_a_pause_to_disk_writes_no_more_than_the_sessions_disk(
    real_engine: Engine, paused_dir: Path
) -> None:
    # Sparse files claim more than the session's disk holds: the host keeps what fits
    # that disk, names the rest as not copied, and keeps a user's file named like its own.
    async with await real_engine.open_session() as session:
        quota, each = session.files.quota_bytes, LIMITS.file_bytes
        code = (
            f"for i in range({quota // each + 2}):\n"
            f"    open(f'sparse{{i}}', 'wb').truncate({each})\n"
            "open('.corral-keeper.txt', 'w').write('mine')"
        )
        assert (await session.run(code)).outcome == "ok"
        assert await session.pause("filesystem") == "filesystem"
        largest = await anyio.to_thread.run_sync(_largest_file, paused_dir)
        assert largest <= quota + (1 << 20)  # the tar's headers beside the bytes kept
        lost = session.pause_state.lost
        assert sum(name.startswith("sparse") for name in lost) >= 2, lost
        result = await session.run("open('.corral-keeper.txt').read()")
        assert result.result == {"text/plain": "'mine'"}

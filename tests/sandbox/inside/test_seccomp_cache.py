"""The cached seccomp program: used only when sound and ours, replaced otherwise, never
reached through a link; whatever is planted, the zygote gets the policy's own program."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from corral.sandbox.inside import _seccomp, _seccomp_cache
from corral.sandbox.inside._seccomp_cache import cache_key, cache_name, load_policy_bpf

ALLOW_ALL = (0x06).to_bytes(2, "little") + bytes(2) + bytes(4) + (0x7FFF0000).to_bytes(4, "little")
"""One BPF instruction, ``ret SECCOMP_RET_ALLOW``: what an attacker would like workers to load."""


@pytest.fixture(scope="module")
def compiled() -> bytes:
    return _seccomp.build_policy_bpf()


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    return folder


def _file(cache: Path) -> Path:
    return cache / cache_name(cache_key())


def _forged(program: bytes, key: bytes | None = None) -> bytes:
    """A cache file in the right format, with a correct digest, for ``program``."""
    return (
        _seccomp_cache._MAGIC
        + (key if key is not None else cache_key())
        + hashlib.sha256(program).digest()
        + program
    )


def _no_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> bytes:
        raise AssertionError("compiled although a sound copy was cached")

    monkeypatch.setattr(_seccomp, "build_policy_bpf", refuse)


def test_the_first_start_compiles_and_caches_the_next_loads_without_compiling(
    cache: Path, compiled: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_policy_bpf(str(cache)) == compiled
    info = _file(cache).stat()
    assert stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid()
    assert [p.name for p in cache.iterdir()] == [_file(cache).name]  # no temporary left
    _no_compiler(monkeypatch)
    assert load_policy_bpf(str(cache)) == compiled


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[:-8], id="truncated"),
        pytest.param(lambda data: data[:-1] + bytes([data[-1] ^ 1]), id="a flipped bit"),
        pytest.param(lambda data: data + bytes(8), id="extended"),
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: b"#!/bin/sh\n" + data[10:], id="another format"),
    ],
)
def test_a_damaged_copy_is_compiled_again_and_replaced(
    cache: Path, compiled: bytes, damage: Callable[[bytes], bytes]
) -> None:
    load_policy_bpf(str(cache))
    path = _file(cache)
    path.write_bytes(damage(path.read_bytes()))
    assert load_policy_bpf(str(cache)) == compiled
    assert path.read_bytes() == _forged(compiled)


def test_a_copy_for_another_key_is_never_used(cache: Path, compiled: bytes) -> None:
    # Another libseccomp or policy version, once at this name: its program is not this one's.
    _file(cache).write_bytes(_forged(ALLOW_ALL, key=bytes(32)))
    _file(cache).chmod(0o600)
    assert load_policy_bpf(str(cache)) == compiled


def test_a_planted_link_is_replaced_never_followed(
    cache: Path, compiled: bytes, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere.bpf"
    target.write_bytes(_forged(ALLOW_ALL))  # a sound-looking file the link points at
    target.chmod(0o600)
    _file(cache).symlink_to(target)
    assert load_policy_bpf(str(cache)) == compiled
    assert target.read_bytes() == _forged(ALLOW_ALL)  # neither read nor written through
    assert not _file(cache).is_symlink()
    assert _file(cache).read_bytes() == _forged(compiled)


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_a_copy_others_may_write_is_refused(cache: Path, compiled: bytes, mode: int) -> None:
    _file(cache).write_bytes(_forged(ALLOW_ALL))
    _file(cache).chmod(mode)
    assert load_policy_bpf(str(cache)) == compiled
    assert _file(cache).read_bytes() == _forged(compiled)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's file needs root")
def test_a_copy_of_another_user_is_refused(cache: Path, compiled: bytes) -> None:
    _file(cache).write_bytes(_forged(ALLOW_ALL))
    _file(cache).chmod(0o600)
    os.chown(_file(cache), 12345, 12345)
    assert load_policy_bpf(str(cache)) == compiled
    assert _file(cache).stat().st_uid == os.geteuid()


def test_a_hard_link_to_the_copy_is_refused(cache: Path, compiled: bytes, tmp_path: Path) -> None:
    outside = tmp_path / "outside.bpf"
    outside.write_bytes(_forged(ALLOW_ALL))
    outside.chmod(0o600)
    os.link(outside, _file(cache))
    assert load_policy_bpf(str(cache)) == compiled
    assert outside.read_bytes() == _forged(ALLOW_ALL)  # replaced by rename, not rewritten


def test_a_directory_at_the_name_leaves_the_policy_compiled(cache: Path, compiled: bytes) -> None:
    _file(cache).mkdir()
    assert load_policy_bpf(str(cache)) == compiled
    assert _file(cache).is_dir()
    assert sorted(p.name for p in cache.iterdir()) == [_file(cache).name]  # no temporary left


def test_a_linked_or_shared_cache_folder_is_not_used(
    cache: Path, compiled: bytes, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(cache)
    assert load_policy_bpf(str(link)) == compiled
    assert list(cache.iterdir()) == []  # nothing written through the link
    cache.chmod(0o777)
    assert load_policy_bpf(str(cache)) == compiled
    assert list(cache.iterdir()) == []
    assert load_policy_bpf(None) == compiled

"""A host folder as every session's data dir (container mode's MOUNT_FOLDER): sessions share it
with the host, and no other worker sees it."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from corral._limits import Limits
from corral._uids import DEFAULT_UID_RANGE
from corral.engine import Engine
from corral.errors import ConfigError

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp(prefix="corral-data-", dir="/var/tmp"))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(scope="module")
async def engine(folder: Path) -> AsyncIterator[Engine]:
    (folder / "host.txt").write_text("from the host")
    async with Engine(capacity=2, limits=Limits(timeout=20), session_data_dir=folder) as started:
        yield started


def _in_range(uid: int) -> bool:
    return DEFAULT_UID_RANGE.first <= uid < DEFAULT_UID_RANGE.first + DEFAULT_UID_RANGE.count


async def test_sessions_share_the_folder_with_the_host(engine: Engine, folder: Path) -> None:
    session = await engine.open_session()
    try:
        result = await session.run(
            "import os\nopen('mine.txt', 'w').write('from the code')\n"
            "(os.getcwd(), open('host.txt').read(), open('/mnt/data/host.txt').read())"
        )
    finally:
        await session.close()
    assert result.outcome == "ok", result.stderr
    assert result.result == {"text/plain": repr((str(folder), "from the host", "from the host"))}
    kept = await anyio.Path(folder / "mine.txt").read_text()
    assert kept == "from the code"  # kept after the session
    # The folder is the session's own host uid's, and so is what its code wrote.
    owner, made = os.stat(folder), os.stat(folder / "mine.txt")
    assert owner.st_uid == made.st_uid
    assert _in_range(owner.st_uid)
    assert os.stat(folder / "host.txt").st_uid == os.getuid()  # the host's own file is not


async def test_a_new_session_adopts_what_an_earlier_one_made(engine: Engine, folder: Path) -> None:
    first = await engine.open_session()
    try:
        assert (await first.run("open('old.txt', 'w').write('1')")).outcome == "ok"
    finally:
        await first.close()
    second = await engine.open_session()
    try:
        result = await second.run("open('old.txt', 'a').write('2')\nopen('old.txt').read()")
    finally:
        await second.close()
    assert result.result == {"text/plain": "'12'"}, result.stderr


@pytest.mark.parametrize("preamble", ["", "import numpy\n"])  # lean and full zygote
async def test_other_workers_never_see_it(engine: Engine, folder: Path, preamble: str) -> None:
    result = await engine.run(
        preamble + "import json, os\n"
        "print(json.dumps({p: sorted(os.listdir(p)) if os.path.isdir(p) else None\n"
        "                  for p in ('/.corral-data', '/mnt/data', os.getcwd())}))\n"
        f"print(os.path.exists({str(folder / 'host.txt')!r}))"
    )
    assert result.outcome == "ok", result.stderr
    listing, exists = result.stdout.splitlines()
    assert "host.txt" not in listing
    # The full zygote's template holds the folder's bind, covered empty in every worker.
    assert json.loads(listing)["/.corral-data"] == ([] if preamble else None)
    assert exists == "False"


async def test_a_link_is_not_a_data_folder(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ConfigError, match="not a directory"):
        async with Engine(capacity=1, session_data_dir=tmp_path / "link"):
            pass

"""corral's runtime directory, and the attack it exists for: root writing through /tmp.

The attack runs for real, but in a private mount namespace with its own /tmp, so nothing a
test plants is visible to the host.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import corral
from corral.errors import IsolationError
from corral.sandbox.host._runtime import private_dir

ROOT = os.geteuid() == 0


def test_a_missing_directory_is_made_0700(tmp_path: Path) -> None:
    made = private_dir(tmp_path, "corral", "cache")
    assert made == tmp_path / "corral" / "cache"
    for path in (tmp_path / "corral", made):
        info = os.lstat(path)
        assert stat.S_ISDIR(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o700
        assert info.st_uid == os.geteuid()


def test_an_existing_directory_of_ours_gets_its_mode_mended(tmp_path: Path) -> None:
    (tmp_path / "corral").mkdir(mode=0o755)
    (tmp_path / "corral").chmod(0o777)
    private_dir(tmp_path, "corral")
    assert stat.S_IMODE(os.lstat(tmp_path / "corral").st_mode) == 0o700


def test_a_planted_link_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    (tmp_path / "corral").symlink_to(target)
    with pytest.raises(IsolationError, match="not a directory of corral's"):
        private_dir(tmp_path, "corral")
    assert stat.S_IMODE(os.lstat(target).st_mode) == 0o755  # untouched


def test_a_planted_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "corral").write_text("not a folder")
    with pytest.raises(IsolationError):
        private_dir(tmp_path, "corral")


@pytest.mark.skipif(not ROOT, reason="needs root to give the folder another owner")
def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    (tmp_path / "corral").mkdir(mode=0o700)
    os.chown(tmp_path / "corral", 12345, 12345)
    with pytest.raises(IsolationError, match="belongs to uid 12345"):
        private_dir(tmp_path, "corral")


@pytest.mark.skipif(not ROOT, reason="needs root to share a parent with others")
def test_a_parent_others_may_write_to_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # world-writable without the sticky bit: anyone may swap entries
    with pytest.raises(IsolationError, match="writable by others"):
        private_dir(shared, "corral")


_ATTACK = textwrap.dedent(
    """\
    import json, os, subprocess, sys
    subprocess.run(["mount", "-t", "tmpfs", "private-tmp", "/tmp"], check=True)
    os.chmod("/tmp", 0o1777)
    os.environ["MPLCONFIGDIR"] = "/tmp/test-own-mpl"  # this script's own matplotlib
    import matplotlib.font_manager as fm
    version = fm.FontManager.__version__
    victim = "/tmp/victim.txt"
    with open(victim, "w") as out:
        out.write("precious")
    # What a local user could plant, as in issue 8: a cache file linked to a root-owned file,
    # and a matplotlibrc of their own for every worker to load.
    os.makedirs("/tmp/matplotlib", mode=0o777)
    os.symlink(victim, f"/tmp/matplotlib/fontlist-v{version}.json")
    with open("/tmp/matplotlib/matplotlibrc", "w") as rc:
        rc.write("figure.dpi: 7\\n")
    import anyio
    from corral.engine import Engine

    async def main():
        async with Engine(capacity=1) as engine:
            result = await engine.run(
                "import matplotlib, matplotlib.pyplot as plt\\n"
                "plt.plot([1, 2]); plt.savefig('p.png')\\n"
                "print(matplotlib.rcParams['figure.dpi'])")
        return result
    result = anyio.run(main)
    print(json.dumps({
        "outcome": result.outcome, "stdout": result.stdout, "stderr": result.stderr,
        "victim": open(victim).read(),
        "planted": sorted(os.listdir("/tmp/matplotlib")),
        "link": os.readlink(f"/tmp/matplotlib/fontlist-v{version}.json"),
    }))
    """
)


@pytest.mark.isolation
@pytest.mark.skipif(not ROOT or shutil.which("unshare") is None, reason="needs root and unshare")
@pytest.mark.skipif(
    any(Path(p).resolve().is_relative_to("/tmp") for p in (sys.prefix, corral.__file__)),
    reason="the attack covers /tmp with a fresh tmpfs, which would hide this checkout's runtime",
)
def test_the_matplotlib_symlink_attack_leaves_the_victim_intact(tmp_path: Path) -> None:
    script = tmp_path / "attack.py"
    script.write_text(_ATTACK)
    unshare = shutil.which("unshare") or "unshare"
    done = subprocess.run(
        [unshare, "-m", "--propagation", "private", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["outcome"] == "ok", seen["stderr"]
    assert seen["victim"] == "precious"  # root wrote nothing through the planted link
    assert seen["stdout"].strip() != "7.0"  # nor loaded the planted matplotlibrc
    assert len(seen["planted"]) == 2  # and added nothing beside what was planted
    assert seen["link"] == "/tmp/victim.txt"

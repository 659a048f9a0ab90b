"""The working folder as code sees it: sources under their own names, read-only (real workers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral._limits import Limits
from corral.engine import Engine, Input
from corral.sandbox.inside import _workdir
from corral.sandbox.inside._workdir import changed_paths, snapshot
from tests.sandbox.inside.deep_trees import remove_deep

_LEVELS = 1200  # deeper than the recursion limit

pytestmark = [pytest.mark.anyio, pytest.mark.isolation]

LIMITS = Limits(timeout=10)
CSV = b"name,score\nada,3\n"


async def test_a_source_appears_under_its_name_read_only(engine: Engine) -> None:
    scores = Input(id="s1", text=CSV, original=CSV, media_type="text/csv", name="scores.csv")
    notes = Input(id="n1", text=b"plain notes\n", name="notes.md")  # text only, no original
    code = (
        "import pandas as pd\n"
        "frame = pd.read_csv('scores.csv')\n"
        "try:\n    open('scores.csv', 'w').write('x')\nexcept OSError as e:\n    print(e.errno)\n"
        "print(open('notes.md').read(), end='')\n"
        "{k: v['name'] for k, v in input_assets.items()}, int(frame.score.sum())"
    )
    result = await engine.run(code, inputs=[scores, notes], limits=LIMITS)
    assert result.outcome == "ok", result.stderr
    assert result.stdout == "30\nplain notes\n"  # 30 is EROFS: the source cannot be changed
    assert result.text == "({'s1': 'scores.csv', 'n1': 'notes.md'}, 3)"
    assert result.files == ()  # a source is not a file the run produced


async def test_an_unnamed_source_has_no_name_and_no_link(engine: Engine) -> None:
    plain = Input(id="p1", text=b"x")
    result = await engine.run(
        "import os\ninput_assets['p1']['name'], [n for n in os.listdir() if os.path.islink(n)]",
        inputs=[plain],
        limits=LIMITS,
    )
    assert result.text == "(None, [])"


async def test_two_sources_may_not_share_a_name(engine: Engine) -> None:
    twins = [Input(id=f"t{i}", text=b"x", name="same.txt") for i in range(2)]
    result = await engine.run("1", inputs=twins, limits=LIMITS)
    assert (result.outcome, result.message) == ("invalid_input", "two inputs are named 'same.txt'")


def test_input_names_are_plain_file_names() -> None:
    for bad in ("a/b.csv", "..", ".", "nul\x00.csv", "x" * 256, "tab\t.csv"):
        with pytest.raises(ValueError, match="plain file name"):
            Input(id="bad", text=b"", name=bad)
    assert Input(id="ok", text=b"", name="résumé 2024.csv").name == "résumé 2024.csv"


def test_snapshot_walks_deep_trees_without_recursion_and_spots_changes(tmp_path: Path) -> None:
    deep = tmp_path
    for _ in range(_LEVELS):  # deeper than the recursion limit; mkdir(parents=True) recurses
        deep = deep / "d"
        deep.mkdir()
    try:
        (deep / "leaf.txt").write_text("a")
        (tmp_path / "top.txt").write_text("b")
        before = snapshot(str(tmp_path))
        assert sorted(before) == ["d" + "/d" * (_LEVELS - 1) + "/leaf.txt", "top.txt"]
        assert changed_paths(before, snapshot(str(tmp_path))) == []
        (tmp_path / "top.txt").write_text("bb")
        (tmp_path / "new.txt").write_text("c")
        (deep / "leaf.txt").unlink()  # gone: not listed
        assert changed_paths(before, snapshot(str(tmp_path))) == ["new.txt", "top.txt"]
    finally:
        remove_deep(tmp_path, "d", _LEVELS)


def test_snapshot_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_workdir, "_SNAPSHOT_ENTRIES", 10)
    for index in range(30):
        (tmp_path / f"f{index}").write_text("x")
    assert len(snapshot(str(tmp_path))) == 10

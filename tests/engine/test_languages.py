"""The language registry: what is served where, and why not the rest (no sandbox needed).

Toolchains are real folders made here: a ``bin/`` of small executables stands for a root the
operator names in ``[languages.NAME] path``.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral._config import Config
from corral.engine import LANGUAGE_NAMES, Languages, discover_languages, language_for_path
from corral.engine._languages import _too_wide
from corral.errors import LanguageUnavailable

SHARED = Path("/var/tmp")


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder outside /tmp and /work (each sandbox has its own of those, so a toolchain
    there is refused, and checkouts live under /work): under /var/tmp."""
    folder = SHARED / f"corral-test-toolchains-{secrets.token_hex(4)}"
    folder.mkdir(parents=True)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _toolchain(root: Path, *tools: str) -> Path:
    (root / "bin").mkdir(parents=True)
    for tool in tools:
        path = root / "bin" / tool
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return root


def test_every_language_is_served_or_says_why() -> None:
    languages = discover_languages()
    report = languages.as_dict()
    assert list(report) == list(LANGUAGE_NAMES)
    for name in LANGUAGE_NAMES[1:]:
        entry = report[name]
        assert isinstance(entry, dict)
        assert entry["served"] is (name in languages.served)
        assert entry["detail"], name
    if shutil.which("g++"):
        cpp = languages.get("cpp")
        assert cpp.compiled
        assert os.path.isabs(cpp.compile[0])  # a path the sandbox can run: no alternatives link
    if shutil.which("bash"):
        assert not languages.get("bash").compiled


def test_a_configured_root_serves_its_language_bound_read_only(tmp_path: Path) -> None:
    root = _toolchain(tmp_path / "go-root", "go")
    languages = discover_languages({"go": str(root)})
    go = languages.get("go")
    assert go.compile[0] == str(root / "bin" / "go")
    assert go.binds == (str(root),)
    assert str(root) in languages.binds()
    # Another root is another toolchain: its artifacts are never shared.
    other = discover_languages({"go": str(_toolchain(tmp_path / "other", "go"))})
    assert other.get("go").identity != go.identity


def test_a_root_without_the_tool_or_not_a_folder_says_why(tmp_path: Path) -> None:
    empty = _toolchain(tmp_path / "empty")
    languages = discover_languages({"typescript": str(empty), "go": str(tmp_path / "nowhere")})
    assert languages.missing["typescript"] == f"no tsc in {empty}/bin"
    assert "is not a folder" in languages.missing["go"]
    with pytest.raises(LanguageUnavailable, match="typescript is not served here: no tsc"):
        languages.get("typescript")


def test_a_toolchain_where_sandboxes_have_their_own_folders_is_refused() -> None:
    languages = discover_languages({"go": "/tmp"})
    assert languages.missing["go"] in (
        "no go in /tmp/bin",
        "/tmp/bin/go lies where each sandbox has its own file system",
    )


def test_unknown_languages_are_refused() -> None:
    with pytest.raises(LanguageUnavailable, match="unknown language 'cobol'"):
        discover_languages().get("cobol")
    with pytest.raises(LanguageUnavailable, match=r"\[languages.cobol\]"):
        discover_languages({"cobol": "/usr"})
    assert Languages.none("twin").missing["cpp"] == "twin"


def test_suffixes_name_languages() -> None:
    assert [language_for_path(p) for p in ("a.cpp", "B.JAVA", "m.rs", "x.sh", "y.txt")] == [
        "cpp",
        "java",
        "rust",
        "bash",
        None,
    ]


def test_config_reads_languages_paths(tmp_path: Path) -> None:
    root = _toolchain(tmp_path / "node-root", "node", "tsc")
    toml = tmp_path / "corral.toml"
    toml.write_text(f'[languages.typescript]\npath = "{root}"\n')
    config = Config.load(flags={"config": str(toml)}, environ={})
    assert config.language_paths() == {"typescript": str(root)}
    assert config.languages().get("typescript").run[0] == str(root / "bin" / "node")
    toml.write_text("[languages.cobol]\npath = '/usr'\n")
    with pytest.raises(Exception, match="cobol"):
        Config.load(flags={"config": str(toml)}, environ={})


def test_a_tool_in_a_home_or_a_top_folder_would_bind_too_much() -> None:
    # A node in ~/bin or a go in /opt/bin: its "root" is all of ~ or /opt, with whatever
    # else is there. Such a toolchain is refused unless configured by its own folder.
    for root in ("/root", "/home/alice", "/opt", os.path.expanduser("~")):
        assert _too_wide(root), root
    for root in ("/opt/go", "/root/.rustup/toolchains/stable", "/usr/lib/jvm/java-17"):
        assert not _too_wide(root), root

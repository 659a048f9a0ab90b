"""``corral doctor``'s languages: what is served and why not the rest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from corral.engine import LANGUAGE_NAMES, discover_languages

CORRAL = str(Path(sys.executable).with_name("corral"))


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CORRAL, "doctor", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_json_has_a_languages_entry() -> None:
    report = json.loads(_doctor("--json").stdout)
    languages = report["languages"]
    assert list(languages) == list(LANGUAGE_NAMES)
    found = discover_languages()
    for name in LANGUAGE_NAMES[1:]:
        assert languages[name]["served"] is (name in found.served)
        if name in found.missing:
            assert languages[name]["detail"] == found.missing[name]


def test_the_table_lists_every_language() -> None:
    out = _doctor().stdout
    assert "languages" in out
    for name in LANGUAGE_NAMES:
        assert name in out

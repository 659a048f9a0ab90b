"""DIAL path resolution with a component-wise containment check (docs/dial.md §2.3)."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from corral.http._paths import resolve


@pytest.mark.parametrize(
    ("path", "relative"),
    [
        ("t.csv", "t.csv"),
        ("sub/dir/t2.csv", "sub/dir/t2.csv"),
        ("/mnt/data/abs.csv", "abs.csv"),
        ("a/../b.csv", "b.csv"),
        ("", "."),
        ("//mnt//data/./x", "x"),
    ],
)
def test_paths_inside_the_root(path: str, relative: str) -> None:
    assert resolve(path, "/mnt/data").relative == relative


@pytest.mark.parametrize(
    ("path", "absolute"),
    [
        ("/etc/x.csv", "/etc/x.csv"),
        ("../x.csv", "/mnt/x.csv"),
        ("../../../../etc/passwd", "/etc/passwd"),
        ("../data2/x.csv", "/mnt/data2/x.csv"),
        ("/mnt/data2/x.csv", "/mnt/data2/x.csv"),
        ("a\0b", "/mnt/data/a\0b"),
    ],
)
def test_paths_outside_the_root_are_bad(path: str, absolute: str) -> None:
    with pytest.raises(HTTPException) as caught:
        resolve(path, "/mnt/data")
    detail: object = caught.value.detail
    assert caught.value.status_code == 400
    assert detail == {"detail": f"Bad path: {absolute}"}

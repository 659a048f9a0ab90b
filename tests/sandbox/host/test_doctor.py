"""`corral doctor`: what the kernel offers and what corral needs."""

from __future__ import annotations

import json
import platform

import pytest

from corral.sandbox import DoctorReport, Feature, doctor


@pytest.mark.skipif(platform.system() != "Linux", reason="corral's sandbox is Linux-only")
def test_report_lists_required_features_and_is_json_ready() -> None:
    report = doctor()
    names = {f.name for f in report.features}
    assert {"linux", "namespaces", "seccomp", "libseccomp", "pidfd"} <= names
    assert all(f.detail for f in report.features)
    data = report.as_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["ok"] is report.ok
    features = data["features"]
    assert isinstance(features, list)
    assert [f["name"] for f in features] == [f.name for f in report.features]


def test_ok_means_no_required_feature_is_missing() -> None:
    report = doctor()
    assert report.ok is (report.problems == [])
    missing = [f for f in report.features if f.required and not f.available]
    assert [p.split(":")[0] for p in report.problems] == [f.name for f in missing]


def test_a_missing_required_feature_is_a_problem_with_its_reason() -> None:
    report = DoctorReport(
        (
            Feature("linux", True, True, "Linux 6.1"),
            Feature("namespaces", False, True, "user namespaces are disabled"),
            Feature("cgroup v2", False, False, "not used"),
        )
    )
    assert report.ok is False
    assert report.problems == ["namespaces: user namespaces are disabled"]


def test_an_optional_feature_never_blocks() -> None:
    report = DoctorReport((Feature("cgroup v2", False, False, "not used"),))
    assert report.ok is True
    assert report.problems == []

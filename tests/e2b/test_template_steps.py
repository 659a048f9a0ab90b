"""E2B's COPY step read from the archive the SDK uploads: a bad mode is the step's clear
error, never a server error. (Builds with the real SDK: test_templates.py.)"""

from __future__ import annotations

import io
import tarfile

import pytest

from corral.e2b._template_steps import upload_files
from corral.errors import TemplateError


def _archive(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_a_copy_keeps_an_octal_mode_and_refuses_another() -> None:
    archive = _archive("app.py", b"print(1)\n")
    (copied,) = upload_files(3, ["app.py", "app.py", "", "0755"], archive, 1 << 20)
    assert copied.mode == 0o755
    for bad in ("8", "0789", "rwx", "07777777"):
        with pytest.raises(TemplateError, match=r"step 3 \(copy\): mode"):
            upload_files(3, ["app.py", "app.py", "", bad], archive, 1 << 20)

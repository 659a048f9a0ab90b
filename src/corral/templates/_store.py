"""Templates on disk: one folder per template in the data folder, its layer and its record.

::

    <data_dir>/templates/            0700, the server's alone
        <name>/                      0700
            template.json            the record (versioned), replaced atomically
            layer-<build>/           what the build made, never changed after
                site-packages/       on sys.path in every sandbox of the template
                files/               copied into each sandbox's home at its start
        .staging/<build>/            a build in progress (removed when it ends)

A build writes its layer under ``.staging`` and renames it into place, then replaces the
record: a reader sees the old template or the new one, never half of one. The layer's own
files are 0644/0755 (the sandbox's uid reads them through a read-only bind; the folders above
keep everyone else out). The record is read again whenever it changed, so a server sees a
template the CLI built (or removed) without a restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral import _fs
from corral.errors import TemplateError, TemplateNotFound
from corral.templates._spec import TemplateSpec, check_name, describe

__all__ = ["OPERATOR", "Template", "TemplateStore"]

OPERATOR = ""
"""The owner of a template built with the CLI: every key may use it."""
_RECORD = "template.json"
_VERSION = 1
_STAGING = ".staging"
_MAX_RECORD_BYTES = 1024 * 1024
_STALE_STAGING = 24 * 3600  # seconds after which a staged layer is a dead build's


@dataclass(frozen=True, slots=True)
class Template:
    """A built template, as its record says."""

    name: str
    owner: str
    build_id: str
    created_at: float
    base: str
    layer: Path
    env: tuple[tuple[str, str], ...] = ()
    workdir: str = ""
    preload: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()
    layer_bytes: int = 0

    @property
    def site_packages(self) -> Path:
        return self.layer / "site-packages"

    @property
    def files(self) -> Path:
        return self.layer / "files"

    def usable_by(self, tenant: str) -> bool:
        """The operator's templates are everyone's; a key's are its own."""
        return self.owner == OPERATOR or self.owner == tenant

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "owner": self.owner or "operator",
            "build_id": self.build_id,
            "created_at": self.created_at,
            "base": self.base,
            "env": dict(self.env),
            "workdir": self.workdir,
            "preload": list(self.preload),
            "steps": list(self.steps),
            "layer_bytes": self.layer_bytes,
        }


def _tree_bytes(path: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


class TemplateStore:
    """The data folder's templates."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.root = Path(data_dir) / "templates"
        self._cache: dict[str, tuple[tuple[int, int], Template]] = {}

    def _ready(self) -> Path:
        _fs.make_private_dir(self.root)
        return self.root

    # reading -------------------------------------------------------------------------

    def find(self, name: str) -> Template | None:
        """The template called ``name``, or None (a bad name, or a record unreadable)."""
        try:
            check_name(name)
        except TemplateError:
            return None
        record = self.root / name / _RECORD
        try:
            info = os.stat(record, follow_symlinks=False)
        except OSError:
            self._cache.pop(name, None)
            return None
        key = (info.st_mtime_ns, info.st_ino)
        cached = self._cache.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]
        template = self._read(name, record)
        if template is not None:
            self._cache[name] = (key, template)
        return template

    def get(self, name: str, tenant: str | None = None) -> Template:
        """``name``, if ``tenant`` may use it (None: whoever owns it).

        Raises:
            TemplateNotFound: there is none, or it is another key's.
        """
        template = self.find(name)
        if template is None or (tenant is not None and not template.usable_by(tenant)):
            raise TemplateNotFound(name)
        return template

    def list(self, tenant: str | None = None) -> list[Template]:
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        found = [self.find(n) for n in names if not n.startswith(".")]
        return [t for t in found if t is not None and (tenant is None or t.usable_by(tenant))]

    def _read(self, name: str, record: Path) -> Template | None:
        try:
            raw = json.loads(_fs.read_bytes(record.parent, _RECORD, max_bytes=_MAX_RECORD_BYTES))
            if raw.get("version") != _VERSION or raw.get("name") != name:
                return None
            layer = record.parent / str(raw["layer"])
            if "/" in str(raw["layer"]) or not layer.is_dir():
                return None
            return Template(
                name=name,
                owner=str(raw["owner"]),
                build_id=str(raw["build_id"]),
                created_at=float(raw["created_at"]),
                base=str(raw["base"]),
                layer=layer,
                env=tuple((str(k), str(v)) for k, v in raw["env"]),
                workdir=str(raw["workdir"]),
                preload=tuple(str(m) for m in raw["preload"]),
                steps=tuple(str(s) for s in raw["steps"]),
                layer_bytes=int(raw["layer_bytes"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # writing -------------------------------------------------------------------------

    def check_owner(self, name: str, owner: str) -> None:
        """Refuse to build over another owner's template.

        Raises:
            TemplateError: ``name`` is taken by another key (or the operator's, for a key).
        """
        existing = self.find(check_name(name))
        if existing is not None and existing.owner != owner:
            raise TemplateError(f"template {name!r} belongs to another owner")

    def staging(self) -> tuple[str, Path]:
        """A new build's id and its empty layer folder (``site-packages`` and ``files``)."""
        build_id = time.strftime("%Y%m%d%H%M%S") + "-" + secrets.token_hex(4)
        staging = self._ready() / _STAGING
        _fs.make_private_dir(staging)
        self._sweep(staging)
        layer = staging / build_id
        layer.mkdir(mode=0o755)
        (layer / "site-packages").mkdir(mode=0o755)
        (layer / "files").mkdir(mode=0o755)
        return build_id, layer

    def _sweep(self, folder: Path, keep: str = "") -> None:
        """Remove what is a day old in ``folder`` but ``keep``: what builds that died left in
        ``.staging``, or layers a template no longer uses (no zygote lives that long idle)."""
        cutoff = time.time() - _STALE_STAGING
        for entry in folder.iterdir():
            if entry.name == keep or entry.name == _RECORD:
                continue
            with contextlib.suppress(OSError):
                if entry.lstat().st_mtime < cutoff:
                    shutil.rmtree(entry, ignore_errors=True)

    def retire(self, template: Template) -> None:
        """Remove ``template``'s layer if a newer build replaced it (its zygote has closed)."""
        current = self.find(template.name)
        if current is not None and current.layer != template.layer:
            shutil.rmtree(template.layer, ignore_errors=True)

    def discard(self, staged: Path) -> None:
        shutil.rmtree(staged, ignore_errors=True)

    def install(
        self, name: str, owner: str, spec: TemplateSpec, build_id: str, staged: Path
    ) -> Template:
        """Make the staged layer ``name``'s; the template it replaces goes (its layer too).

        Raises:
            TemplateError: another owner's template took the name meanwhile.
        """
        self.check_owner(name, owner)
        previous = self.find(name)
        folder = self._ready() / name
        _fs.make_private_dir(folder)
        layer_name = f"layer-{build_id}"
        os.rename(staged, folder / layer_name)
        record = {
            "version": _VERSION,
            "name": name,
            "owner": owner,
            "build_id": build_id,
            "created_at": time.time(),
            "base": spec.base,
            "layer": layer_name,
            "env": [list(pair) for pair in spec.env],
            "workdir": spec.workdir,
            "preload": list(spec.preload),
            "steps": [describe(step) for step in spec.steps],
            "layer_bytes": _tree_bytes(folder / layer_name),
        }
        with _fs.AtomicWriter(folder, _RECORD, mode=0o600) as writer:
            writer.write(json.dumps(record, indent=1).encode())
            writer.commit()
        # The layer it replaces may still be bound in a running server's sandboxes: that
        # server removes it when their zygote closes; a day from now (not from its build)
        # it goes here in any case.
        if previous is not None:
            with contextlib.suppress(OSError):
                os.utime(previous.layer)
        self._sweep(folder, keep=layer_name)
        return self.get(name)

    def remove(self, name: str, owner: str | None = None) -> Template:
        """Remove ``name`` (if ``owner`` is None or owns it): its record first, then its layer.

        Raises:
            TemplateNotFound: there is none (or it is another owner's).
        """
        template = self.find(name)
        if template is None or (owner is not None and template.owner != owner):
            raise TemplateNotFound(name)
        folder = self.root / name
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / _RECORD)
        self._cache.pop(name, None)
        shutil.rmtree(folder, ignore_errors=True)
        return template

"""The zygote's side of the cgroups: each worker's own, made before it runs, gone at its reap.

The engine delegates one folder per cgroup hierarchy to the zygote (owned by the zygote's
uid, handed over as descriptors: after its pivot the zygote sees no ``/sys``). For each spawn
the zygote makes the worker's cgroup ``w<uid>`` in every hierarchy, writes its limits, and
opens its ``cgroup.procs`` while still its own uid; then it clones the worker and writes the
child's pid there before the child has changed a single credential. So every process the
worker will ever start is born inside its cgroup: nothing it does escapes the walls, and
nothing is charged elsewhere but the few pages of its first instants.

Why the ``cgroup.procs`` descriptor is opened first: cgroup v1 lets a non-root writer move
only a process whose real or saved uid is the writer's effective uid, as of the descriptor's
opening. The zygote clones with the worker's uid as its effective uid (the new user
namespace's owner), and the child starts with the zygote's real and saved uids: opened while
the zygote is itself, the descriptor may move it. In v2 the zygote lives in a leaf of its own
delegated folder, so the move stays below a folder it owns, as delegation requires.

When the zygote reaps the worker, the worker being init of its pid namespace, every process
of it is gone and its cgroup is empty. It is kept as a spare (renamed ``spare-<n>``) rather than
removed, up to ``SPARES`` of them, and the next spawn renames a spare to its own name instead
of making a cgroup: a memory cgroup's creation and removal cost more than the rest of its
set-up together (about 0.2 ms of CPU in v1). Nothing of the last worker stays but counters,
which the engine reads as differences, and page cache charged to it, which the kernel reclaims
first under pressure; the limits are written anew for each worker.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from corral.sandbox._control_protocol import CgroupKnob, worker_cgroup_name

__all__ = ["CgroupFolders", "PendingCgroups"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
SPARES = 32
"""Empty cgroups kept, per zygote folder, for the next spawns (about a pool and a capacity)."""
_SPARE = "spare-"
_EVENTS_BYTES = 4096  # an events file is a few short lines
_KNOB_SETS = 16
"""Distinct sets of knobs remembered per hierarchy (a pool's, a few runs' own limits)."""


@dataclass(slots=True)
class PendingCgroups:
    """A new worker's cgroups, made and filled with its limits, waiting for its pid."""

    procs: list[int]
    """Each hierarchy's ``cgroup.procs`` of the new cgroup, open for writing."""

    def attach(self, pid: int) -> None:
        """Move ``pid`` into every one of them; closes the descriptors either way.

        Raises:
            OSError: a move failed (the caller kills the child).
        """
        try:
            for fd in self.procs:
                os.write(fd, str(pid).encode())
        finally:
            self.close()

    def close(self) -> None:
        procs, self.procs = self.procs, []
        for fd in procs:
            os.close(fd)


class CgroupFolders:
    """The zygote's delegated folders, one per hierarchy, and the workers' cgroups in them."""

    def __init__(
        self,
        hierarchies: Sequence[str],
        fds: Sequence[int],
        group_knobs: Sequence[CgroupKnob] = (),
        oom_events: tuple[str, str] | None = None,
    ) -> None:
        if len(hierarchies) != len(fds) or len(set(hierarchies)) != len(hierarchies):
            raise ValueError("one folder per hierarchy")
        self._folders = dict(zip(hierarchies, fds, strict=True))
        self._group_knobs = tuple(group_knobs)
        self._oom_events = oom_events
        self._made: dict[int, list[tuple[int, str | None]]] = {}
        """Per worker uid, the folder of each of its cgroups (a group's, which we close, or
        the zygote's own) and the group's name."""
        self._oom_base: dict[int, int] = {}
        """Per worker uid, the memory kills its (reused) cgroup had counted before it."""
        self._spares: list[tuple[str, int]] = []
        """The empty cgroups (in every hierarchy, outside any group) to reuse: each one's
        name and the memory kills it counted when its last worker was reaped."""
        self._spare_names = 0
        self._by_hierarchy: dict[tuple[CgroupKnob, ...], dict[str, list[CgroupKnob]]] = {}
        """The knobs of a spawn, per hierarchy: the engine sends the same few sets."""

    @property
    def hierarchies(self) -> tuple[str, ...]:
        return tuple(self._folders)

    def prepare(self, uid: int, knobs: Sequence[CgroupKnob], group: str | None) -> PendingCgroups:
        """Make the cgroups of the worker that will have ``uid``, with ``knobs`` written;
        inside ``group`` (made if missing: a key's sessions share one) when given.

        Raises:
            OSError: a cgroup could not be made or filled; none is left behind.
        """
        name = worker_cgroup_name(uid)
        made: list[tuple[int, str | None]] = []
        pending = PendingCgroups([])
        by_hierarchy = self._knobs_by_hierarchy(tuple(knobs))
        spare, kills_before = self._spares[-1] if group is None and self._spares else (None, 0)
        try:
            for hierarchy, folder in self._folders.items():
                parent = folder
                if group is not None:
                    parent = self._group(hierarchy, folder, group)
                made.append((parent, group))
                if not self._make(parent, name, spare) and self._counts_kills(hierarchy):
                    kills_before = 0  # a new cgroup after all: it counts from nothing
                cgroup = os.open(name, _DIR, dir_fd=parent)
                try:
                    _write_knobs(cgroup, by_hierarchy.get(hierarchy, ()))
                    pending.procs.append(os.open("cgroup.procs", os.O_WRONLY, dir_fd=cgroup))
                finally:
                    os.close(cgroup)
        except BaseException:
            pending.close()
            self._remove(name, made)
            raise
        if spare is not None:
            self._spares.pop()  # renamed in every hierarchy: it is this worker's now
        self._made[uid] = made
        # A spare remembers the kills of the workers before: this one's count from there.
        self._oom_base[uid] = kills_before
        return pending

    def _knobs_by_hierarchy(self, knobs: tuple[CgroupKnob, ...]) -> dict[str, list[CgroupKnob]]:
        known = self._by_hierarchy.get(knobs)
        if known is None:
            if len(self._by_hierarchy) >= _KNOB_SETS:
                self._by_hierarchy.clear()
            known = self._by_hierarchy[knobs] = {}
            for knob in knobs:
                known.setdefault(knob.hierarchy, []).append(knob)
        return known

    def _group(self, hierarchy: str, folder: int, group: str) -> int:
        """The folder of ``group``, made (with the group knobs written) if it is new."""
        try:
            os.mkdir(group, 0o755, dir_fd=folder)
            new = True
        except FileExistsError:
            new = False
        fd = os.open(group, _DIR, dir_fd=folder)
        try:
            for knob in self._group_knobs if new else ():
                if knob.hierarchy == hierarchy:
                    _write(fd, knob.name, knob.value)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _counts_kills(self, hierarchy: str) -> bool:
        return self._oom_events is not None and self._oom_events[0] == hierarchy

    @staticmethod
    def _make(parent: int, name: str, spare: str | None) -> bool:
        """Make the cgroup ``name`` in ``parent``, from ``spare`` if it is given and still
        there; whether it was."""
        if spare is not None:
            try:
                os.rename(spare, name, src_dir_fd=parent, dst_dir_fd=parent)
                return True
            except OSError:  # gone: make one, as without spares
                pass
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
        except FileExistsError:
            # Left by a worker whose removal failed: empty, since its uid was reaped.
            os.rmdir(name, dir_fd=parent)
            os.mkdir(name, 0o755, dir_fd=parent)
        return False

    def oom_kills(self, uid: int) -> tuple[int, int]:
        """(how many processes of the worker with ``uid`` the kernel killed for memory, the
        count its cgroup holds: those of the workers that had it before included). The engine
        reads the cgroup itself and counts from its own reading: it is told the second."""
        count = self._oom_count(uid)
        return max(count - self._oom_base.get(uid, 0), 0), count

    def _oom_count(self, uid: int) -> int:
        """The kills its cgroup counts, those of the workers that had it before included."""
        made = self._made.get(uid)
        if made is None or self._oom_events is None:
            return 0
        hierarchy, name = self._oom_events
        index = list(self._folders).index(hierarchy) if hierarchy in self._folders else -1
        if index < 0 or index >= len(made):
            return 0
        try:
            cgroup = os.open(worker_cgroup_name(uid), _DIR, dir_fd=made[index][0])
            try:
                events = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=cgroup)
                try:
                    text = os.read(events, _EVENTS_BYTES).decode()
                finally:
                    os.close(events)
            finally:
                os.close(cgroup)
        except (OSError, UnicodeDecodeError):
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def remove(self, uid: int, oom_count: int | None = None) -> None:
        """Keep the (empty) cgroups of the reaped worker that had ``uid`` as a spare, which
        counted ``oom_count`` memory kills (None: as many as when it got them, for a worker
        that never ran), or remove them (no-op if it had none)."""
        made = self._made.pop(uid, None)
        base = self._oom_base.pop(uid, 0)
        oom_count = base if oom_count is None else oom_count
        if made is None:
            return
        name = worker_cgroup_name(uid)
        if len(self._spares) < SPARES and all(group is None for _, group in made):
            spare = f"{_SPARE}{self._spare_names}"
            self._spare_names += 1
            try:
                for parent, _ in made:
                    os.rename(name, spare, src_dir_fd=parent, dst_dir_fd=parent)
            except OSError:
                pass  # some renamed, some not: removing both names leaves nothing behind
            else:
                self._spares.append((spare, oom_count))
                return
            for parent, _ in made:
                with contextlib.suppress(OSError):
                    os.rmdir(spare, dir_fd=parent)
        self._remove(name, made)

    def _remove(self, name: str, made: list[tuple[int, str | None]]) -> None:
        for (parent, group), folder in zip(made, self._folders.values(), strict=False):
            with contextlib.suppress(OSError):  # the engine sweeps what is left
                os.rmdir(name, dir_fd=parent)
            if group is not None:
                os.close(parent)
                with contextlib.suppress(OSError):  # the group's other sessions still live
                    os.rmdir(group, dir_fd=folder)


def _write_knobs(cgroup: int, knobs: Sequence[CgroupKnob]) -> None:
    """Write ``knobs``, in their order for a new cgroup; one the kernel refuses for now
    (a reused cgroup's v1 memory limit above its old memory+swap limit, say) is written
    again once the others are.

    Raises:
        OSError: a knob refused twice.
    """
    refused = []
    for knob in knobs:
        try:
            _write(cgroup, knob.name, knob.value)
        except OSError:
            refused.append(knob)
    for knob in refused:
        _write(cgroup, knob.name, knob.value)


def _write(folder: int, name: str, value: str) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=folder)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)

"""The zygote's side of the cgroups: each worker's own, made before it runs, gone at its reap.

The engine delegates one folder per cgroup hierarchy to the zygote (owned by the zygote's
uid, handed over as descriptors: after its pivot the zygote sees no ``/sys``). For each spawn
the zygote makes the worker's cgroup ``w<uid>`` in every hierarchy, writes its limits, and
opens the file that moves a process into it while still its own uid; the child it clones is
in every one of them before it has changed a single credential. So every process the worker
will ever start is born inside its cgroup: nothing it does escapes the walls, and nothing is
charged elsewhere but the few pages of its first instants.

How the child gets in: in a v1 hierarchy the child writes ``0`` to its cgroup's ``tasks``
(the calling thread, and a new child has one). A move of one's own single thread needs no
hold on every fork and exit of the host: writing a pid to ``cgroup.procs`` takes the kernel's
threadgroup semaphore for writing, which waits out an RCU grace period and stalls every
fork meanwhile (0.1 to 0.3 ms of a spawn per hierarchy, five hierarchies here). In v2 the
zygote writes the child's pid to ``cgroup.procs``; it lives in a leaf of its own delegated
folder, so the move stays below a folder it owns, as delegation requires.

Why the file is opened by the zygote as itself: the kernel lets a non-root writer move only a
process whose real or saved uid is the writer's effective uid as of the file's opening. The
zygote clones with the worker's uid as its effective uid (the new user namespace's owner),
and the child starts with the zygote's real and saved uids: opened while the zygote is itself,
the file may move it, until the child takes the sandbox's ids.

When the zygote reaps the worker, the worker being init of its pid namespace, every process
of it is gone and its cgroup is empty. It is kept as a spare (renamed ``spare-<n>``) rather than
removed, up to ``SPARES`` of them, with the files a spawn writes still open, and the next spawn
renames a spare to its own name instead of making a cgroup: a memory cgroup's creation and
removal cost more than the rest of its set-up together (about 0.2 ms of CPU in v1), and a dozen
opens and closes of cgroup files cost another 0.1. Nothing of the last worker stays but
counters, which the engine reads as differences, and page cache charged to it, which the kernel
reclaims first under pressure; the limits are written anew for each worker.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Sequence
from dataclasses import dataclass, field

from corral.sandbox._control_protocol import CgroupKnob, worker_cgroup_name

__all__ = ["CgroupFolders", "PendingCgroups"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_WRITE = os.O_WRONLY | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_CLOEXEC
SPARES = 32
"""Empty cgroups kept, per zygote folder, for the next spawns (about a pool and a capacity)."""
_KEPT = 256
"""One-shot workers' and spares' cgroups whose files stay open, at most (about ten descriptors
each), and within ``_KEPT_FDS_SHARE`` of the zygote's descriptor limit; past that, and for a
session's, a spawn opens them and closes them once the child is in."""
_KEPT_FDS_SHARE = 0.5
"""Of the zygote's ``RLIMIT_NOFILE``, what kept cgroup files may hold: a spawn needs the rest."""
_FILES_PER_HIERARCHY = 3  # the move file and up to two knobs: an upper estimate
_SPARE = "spare-"
_EVENTS_BYTES = 4096  # an events file is a few short lines
_KNOB_SETS = 16
"""Distinct sets of knobs remembered per hierarchy (a pool's, a few runs' own limits)."""
_ITSELF = b"0"  # written to v1 ``tasks``: the writing thread itself
_KILL_FIELD = b"\noom_kill "


@dataclass(slots=True)
class _Cgroup:
    """A worker's cgroup in every hierarchy (or a spare's), with the files a spawn writes."""

    name: str
    group: str | None = None
    kept: bool = False
    """Its files stay open from spawn to spawn (a one-shot worker's, within ``_KEPT``)."""
    parents: list[int] = field(default_factory=list)
    """Per hierarchy, the folder it is in: a group's (closed with it) or the zygote's."""
    own_moves: list[int] = field(default_factory=list)
    """The v1 hierarchies' ``tasks``: the child moves itself in."""
    pid_moves: list[int] = field(default_factory=list)
    """The v2 hierarchy's ``cgroup.procs``: the zygote moves the child in."""
    knobs: dict[tuple[int, str], int] = field(default_factory=dict)
    """Per (hierarchy's index, name), an open limit file."""
    oom: int = -1
    """The memory kill counter's file, when kept open."""

    def take_files(self) -> tuple[int, ...]:
        """Its open files, now the caller's to close."""
        oom = (self.oom,) if self.oom >= 0 else ()
        fds = (*self.own_moves, *self.pid_moves, *self.knobs.values(), *oom)
        self.own_moves, self.pid_moves, self.knobs, self.oom = [], [], {}, -1
        return fds

    def close_files(self) -> None:
        for fd in self.take_files():
            os.close(fd)


@dataclass(frozen=True, slots=True)
class PendingCgroups:
    """A new worker's cgroups, made and filled with its limits, waiting for its child.

    Made before the clone with what each side needs after it, so that the zygote, between
    the clone and the next one, touches neither the cgroup's record nor its descriptors
    (each object it touches there costs it a copied page): in v1 it has nothing to do."""

    own_moves: tuple[int, ...]
    """The ``tasks`` files the child writes itself into (v1)."""
    pid_moves: tuple[int, ...]
    """The ``cgroup.procs`` files the zygote writes the child's pid to (v2)."""
    to_close: tuple[int, ...]
    """The files to close once the child is in (those of a cgroup not kept)."""

    def enter(self) -> None:
        """In the new child, before it changes any credential: move itself in where v1 lets
        it (see the module's docstring).

        Raises:
            OSError: a move failed (the child must not run).
        """
        for fd in self.own_moves:
            os.write(fd, _ITSELF)

    def attach(self, pid: int) -> None:
        """In the zygote: move the child ``pid`` in where it cannot move itself (v2).

        Raises:
            OSError: a move failed (the caller kills the child).
        """
        for fd in self.pid_moves:
            os.write(fd, str(pid).encode())

    def close(self) -> None:
        """The spawn is over: close the files a cgroup does not keep open."""
        for fd in self.to_close:
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
        self._oom_index = (
            self.hierarchies.index(oom_events[0])
            if oom_events is not None and oom_events[0] in self._folders
            else -1
        )
        """Which hierarchy counts the memory kills (-1: none)."""
        self._made: dict[int, _Cgroup] = {}
        """Per worker uid, its cgroups."""
        self._oom_base: dict[int, int] = {}
        """Per worker uid, the memory kills its (reused) cgroup had counted before it."""
        self._spares: list[tuple[_Cgroup, int]] = []
        """The empty cgroups (in every hierarchy, outside any group) to reuse, each with the
        memory kills it counted when its last worker was reaped."""
        self._spare_names = 0
        self._kept = 0
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        per_cgroup = _FILES_PER_HIERARCHY * len(self._folders) + 1  # and the kill counter
        self._max_kept = min(_KEPT, int(soft * _KEPT_FDS_SHARE) // per_cgroup)
        self._by_hierarchy: dict[tuple[CgroupKnob, ...], list[list[CgroupKnob]]] = {}
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
        cgroup, kills_before = None, 0
        if group is None and self._spares:
            cgroup, kills_before = self._spares.pop()
            if not self._rename(cgroup, name):
                self._discard(cgroup, name)
                cgroup, kills_before = None, 0
        if cgroup is None:
            cgroup = self._make(name, group)
        try:
            for index, hierarchy_knobs in enumerate(self._knobs_by_hierarchy(tuple(knobs))):
                self._write_knobs(cgroup, index, hierarchy_knobs)
        except BaseException:
            self._discard(cgroup)
            raise
        self._made[uid] = cgroup
        # A spare remembers the kills of the workers before: this one's count from there.
        self._oom_base[uid] = kills_before
        own, by_pid = tuple(cgroup.own_moves), tuple(cgroup.pid_moves)
        if cgroup.kept:
            return PendingCgroups(own, by_pid, ())
        # Not kept: its files are the spawn's, closed with it.
        return PendingCgroups(own, by_pid, cgroup.take_files())

    def _knobs_by_hierarchy(self, knobs: tuple[CgroupKnob, ...]) -> list[list[CgroupKnob]]:
        known = self._by_hierarchy.get(knobs)
        if known is None:
            if len(self._by_hierarchy) >= _KNOB_SETS:
                self._by_hierarchy.clear()
            known = self._by_hierarchy[knobs] = [[] for _ in self._folders]
            order = self.hierarchies
            for knob in knobs:
                if knob.hierarchy in self._folders:
                    known[order.index(knob.hierarchy)].append(knob)
        return known

    def _make(self, name: str, group: str | None) -> _Cgroup:
        """A new cgroup ``name`` in every hierarchy (in ``group``'s folder if given), with
        its files open.

        Raises:
            OSError: it could not be made; none of it is left behind.
        """
        cgroup = _Cgroup(name, group, kept=group is None and self._kept < self._max_kept)
        self._kept += cgroup.kept  # before any file: ``_discard`` counts it back
        try:
            for index, (hierarchy, folder) in enumerate(self._folders.items()):
                parent = folder if group is None else self._group(hierarchy, folder, group)
                cgroup.parents.append(parent)
                _mkdir_afresh(parent, name)
                self._open_files(cgroup, index)
        except BaseException:
            self._discard(cgroup)
            raise
        return cgroup

    def _open_files(self, cgroup: _Cgroup, index: int) -> None:
        """Open what each spawn writes in the hierarchy ``index``: the file that moves the
        child in, and the kill counter if the cgroup is kept."""
        folder = os.open(cgroup.name, _DIR, dir_fd=cgroup.parents[index])
        try:
            try:
                cgroup.own_moves.append(os.open("tasks", _WRITE, dir_fd=folder))
            except FileNotFoundError:  # v2: no ``tasks`` outside a threaded subtree
                cgroup.pid_moves.append(os.open("cgroup.procs", _WRITE, dir_fd=folder))
            if cgroup.kept and self._oom_events is not None and index == self._oom_index:
                cgroup.oom = os.open(self._oom_events[1], _READ, dir_fd=folder)
        finally:
            os.close(folder)

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

    @staticmethod
    def _write_knobs(cgroup: _Cgroup, index: int, knobs: Sequence[CgroupKnob]) -> None:
        """Write ``knobs``, in their order for a new cgroup; one the kernel refuses for now
        (a reused cgroup's v1 memory limit above its old memory+swap limit, say) is written
        again once the others are.

        Raises:
            OSError: a knob refused twice.
        """
        refused = []
        for knob in knobs:
            try:
                os.write(_knob_file(cgroup, index, knob.name), knob.value.encode())
            except OSError:
                refused.append(knob)
        for knob in refused:
            os.write(_knob_file(cgroup, index, knob.name), knob.value.encode())

    @staticmethod
    def _rename(cgroup: _Cgroup, name: str) -> bool:
        """Rename ``cgroup`` to ``name`` in every hierarchy; whether it was (if not, some
        may have the new name: the caller removes it under both)."""
        try:
            for parent in cgroup.parents:
                os.rename(cgroup.name, name, src_dir_fd=parent, dst_dir_fd=parent)
        except OSError:
            return False
        cgroup.name = name
        return True

    def _discard(self, cgroup: _Cgroup, *other_names: str) -> None:
        """Close its files and remove it, under its name and ``other_names`` (no error: the
        engine sweeps what is left)."""
        self._kept -= cgroup.kept
        cgroup.kept = False
        cgroup.close_files()
        for parent, folder in zip(cgroup.parents, self._folders.values(), strict=False):
            for name in (cgroup.name, *other_names):
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=parent)
            if cgroup.group is not None:
                os.close(parent)
                with contextlib.suppress(OSError):  # the group's other sessions still live
                    os.rmdir(cgroup.group, dir_fd=folder)
        cgroup.parents = []

    def release(self, uid: int) -> tuple[int, int]:
        """The worker with ``uid`` was reaped: keep its (empty) cgroup as a spare or remove it,
        and return (how many of its processes the kernel killed for memory, the count its
        cgroup holds: those of the workers that had it before included). The engine reads
        the cgroup itself and counts from its own reading: it is told the second."""
        count = self._oom_count(uid)
        kills = max(count - self._oom_base.get(uid, 0), 0)
        # A spare keeps the count, so that its next worker's kills count from there.
        self.remove(uid, count)
        return kills, count

    def _oom_count(self, uid: int) -> int:
        """The kills its cgroup counts, those of the workers that had it before included."""
        cgroup = self._made.get(uid)
        if cgroup is None or self._oom_events is None:
            return 0
        if not 0 <= self._oom_index < len(cgroup.parents):
            return 0
        try:
            if cgroup.oom >= 0:
                return _kill_count(os.pread(cgroup.oom, _EVENTS_BYTES, 0))
            folder = os.open(cgroup.name, _DIR, dir_fd=cgroup.parents[self._oom_index])
            try:
                events = os.open(self._oom_events[1], _READ, dir_fd=folder)
                try:
                    return _kill_count(os.read(events, _EVENTS_BYTES))
                finally:
                    os.close(events)
            finally:
                os.close(folder)
        except OSError:
            return 0

    def remove(self, uid: int, oom_count: int | None = None) -> None:
        """Keep the (empty) cgroups of the reaped worker that had ``uid`` as a spare, which
        counted ``oom_count`` memory kills (None: as many as when it got them, for a worker
        that never ran), or remove them (no-op if it had none)."""
        cgroup = self._made.pop(uid, None)
        base = self._oom_base.pop(uid, 0)
        oom_count = base if oom_count is None else oom_count
        if cgroup is None:
            return
        if cgroup.kept and len(self._spares) < SPARES:
            spare = f"{_SPARE}{self._spare_names}"
            self._spare_names += 1
            if self._rename(cgroup, spare):
                self._spares.append((cgroup, oom_count))
                return
            self._discard(cgroup, spare)
            return
        self._discard(cgroup)


def _kill_count(events: bytes) -> int:
    """The ``oom_kill`` field of a memory kill counter's text (v1 ``memory.oom_control``, v2
    ``memory.events``: a ``name value`` line per field), 0 without one."""
    at = (b"\n" + events).find(_KILL_FIELD)
    if at < 0:
        return 0
    value = events[at + len(_KILL_FIELD) - 1 :].partition(b"\n")[0]
    return int(value) if value.isdigit() else 0


def _knob_file(cgroup: _Cgroup, index: int, name: str) -> int:
    """The open file of a limit, opened now if it is the first time."""
    fd = cgroup.knobs.get((index, name))
    if fd is None:
        folder = os.open(cgroup.name, _DIR, dir_fd=cgroup.parents[index])
        try:
            fd = cgroup.knobs[index, name] = os.open(name, _WRITE, dir_fd=folder)
        finally:
            os.close(folder)
    return fd


def _mkdir_afresh(parent: int, name: str) -> None:
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
    except FileExistsError:
        # Left by a worker whose removal failed: empty, since its uid was reaped.
        os.rmdir(name, dir_fd=parent)
        os.mkdir(name, 0o755, dir_fd=parent)


def _write(folder: int, name: str, value: str) -> None:
    fd = os.open(name, _WRITE, dir_fd=folder)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)

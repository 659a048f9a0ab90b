"""corral's cgroups on the host: a tree per engine, a folder per zygote, a handle per sandbox.

Every wall of a sandbox (its memory, the kernel memory it causes, its processes, its CPU)
holds for the sandbox as a whole, not per process: each one-shot worker, case server and
session holder has a cgroup of its own, made by the zygote before the worker runs
(``inside/_cgroups``) and holding every process it ever starts. The layout, in each cgroup v1
hierarchy corral uses (memory, pids, cpu, cpuacct, freezer) or in the one v2 tree::

    <the cgroup corral runs in, or [engine] cgroup_parent>/
      corral-<pid>-<n>/      one engine's tree, root's; removed when the engine closes
        z<uid>/              one zygote's folder, delegated to its uid
          w<uid>/            a one-shot worker or case server, made by the zygote
          k-<digest>/        one key's sessions: CPU is shared fairly between keys
            w<uid>/          a session holder and everything it starts
          zygote/            (v2) the zygote itself: a move must stay below z<uid>

corral makes and removes only folders named so, below where it started, and moves no process
of anyone else's. A tree left by an engine that died (its pid gone) is removed at the next
start; one left by a live engine is never touched.

Memory: ``memory.limit_in_bytes`` (v1; swap too where accounted) or ``memory.max`` with
``memory.swap.max`` 0 (v2) bound the sum of the sandbox's pages and the kernel memory they
cause (tmpfs pages, inodes, xattrs, page tables, pipes); on v1 the TCP buffers, which v1
counts apart, get a bound of their own. Past it the kernel kills a process of the sandbox,
and the run's outcome is ``memory_limit``, never the host's pressure.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import itertools
import logging
import os
import re
import select
import signal
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

from corral.errors import IsolationError
from corral.sandbox._control_protocol import CgroupKnob, UseCgroups, worker_cgroup_name

__all__ = [
    "RUNTIME_ALLOWANCE",
    "WANTED_CONTROLLERS",
    "CgroupTree",
    "Hierarchy",
    "SandboxCgroup",
    "discover",
    "key_group",
]

logger = logging.getLogger("corral.sandbox")

WANTED_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "freezer")
"""What corral uses: the walls (memory, pids), CPU shares and accounting, and pausing."""
_V2_CONTROLLERS = ("memory", "pids", "cpu")
RUNTIME_ALLOWANCE = 64 << 20
"""Bytes a sandbox's cgroup holds beyond its memory limit: the runtime's own pages that a
worker touches (copy-on-write of the preloaded heap, page tables) are not the run's. A run
may add ``memory_bytes`` on top of the runtime, as its address-space limit says; one
process past that gets a MemoryError, and the sum of all of them past it here is killed."""
_SHARES = 1024  # v1 cpu.shares of one sandbox (the kernel's default)
_WEIGHT = 100  # v2 cpu.weight of one sandbox (the kernel's default)
_MAX_WEIGHT = 10_000
_CFS_PERIOD_US = 100_000  # v1 cpu.cfs_period_us and v2 cpu.max's period
_TCP_SHARE = 8  # v1: a sandbox's TCP buffers may take 1/8 of its memory limit ...
_MIN_TCP_BYTES = 16 << 20  # ... and at least 16 MiB
_KILL_WAIT = 2.0  # seconds for a leftover process to die once killed
_REMOVE_ATTEMPTS = 3  # kill-and-wait rounds before a cgroup that stays busy is left, logged
_TREE_NAME = re.compile(r"corral-(\d+)-\d+")
_names = itertools.count(1)
_KNOWN_KNOB_SETS = 64  # distinct (memory, pids) pairs remembered before starting afresh
_KNOWN_ZYGOTES = 64  # zygotes whose folders are remembered (an engine has a handful)
_COUNTER_BYTES = 4096  # a counter file (cpuacct.usage, memory.oom_control) is a few lines


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """A mounted cgroup hierarchy and the folder of corral's own cgroup in it."""

    name: str
    """The controllers' names (``memory``, ``cpu,cpuacct``) for v1; ``unified`` for v2."""
    version: int
    controllers: frozenset[str]
    path: str


def _mounts(mountinfo: str) -> Iterator[tuple[str, str, str, str]]:
    """(root, mount point, file system type, super options) of each cgroup mount."""
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if len(after) >= 3 and after[0] in ("cgroup", "cgroup2"):
            yield fields[3], fields[4], after[0], after[2]


def _own(proc_cgroup: str) -> dict[str, str]:
    """Our cgroup path per v1 controller list ("memory", "cpu,cpuacct") and "" for v2."""
    own: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            own[parts[1]] = parts[2]
    return own


def discover(
    parent: str = "", *, mountinfo: str | None = None, proc_cgroup: str | None = None
) -> list[Hierarchy]:
    """The hierarchies corral can use below ``parent`` (default: the cgroup it runs in).

    v1 where a v1 hierarchy has the memory controller, else the v2 tree if it has it.

    Raises:
        IsolationError: no usable hierarchy, with the reason.
    """
    if mountinfo is None:
        with open("/proc/self/mountinfo") as handle:
            mountinfo = handle.read()
    if proc_cgroup is None:
        with open("/proc/self/cgroup") as handle:
            proc_cgroup = handle.read()
    own = _own(proc_cgroup)
    v1: list[Hierarchy] = []
    v2: list[Hierarchy] = []
    for root, point, kind, options in _mounts(mountinfo):
        if kind == "cgroup":
            names = [o for o in options.split(",") if o in WANTED_CONTROLLERS]
            key = next((k for k in own if k and set(k.split(",")) >= set(names)), None)
            if not names or key is None:
                continue
            where = _below(point, root, own[key])
            if where is not None:
                v1.append(Hierarchy(",".join(names), 1, frozenset(names), where))
        elif "" in own:
            where = parent or _below(point, root, own[""])
            if where is not None and os.path.isdir(where):
                v2.append(Hierarchy("unified", 2, _v2_controllers(where), where))
    if parent and v1:
        raise IsolationError("[engine] cgroup_parent is for cgroup v2; this host uses v1")
    if any("memory" in h.controllers for h in v1):
        return v1
    usable = [h for h in v2 if "memory" in h.controllers]
    if usable:
        return usable[:1]
    if v2:
        raise IsolationError(
            f"cgroup v2 at {v2[0].path} does not offer the memory controller to corral's "
            "cgroup: start corral in a delegated cgroup (systemd: Delegate=yes) and name it "
            "with [engine] cgroup_parent"
        )
    raise IsolationError("no cgroup hierarchy with the memory controller is mounted")


def _below(point: str, root: str, own: str) -> str | None:
    if own != root and not own.startswith(root.rstrip("/") + "/"):
        return None  # our cgroup is not inside what this mount shows
    return os.path.join(point, own[len(root.rstrip("/")) :].lstrip("/")).rstrip("/")


def _v2_controllers(path: str) -> frozenset[str]:
    try:
        with open(os.path.join(path, "cgroup.controllers")) as handle:
            return frozenset(handle.read().split())
    except OSError:
        return frozenset()


def key_group(tenant: str) -> str:
    """The group a tenant's sessions share (a digest: the name says nothing of the key)."""
    return "k-" + hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[:24]


_READ_CHUNK = 64 * 1024  # a counter file is a line: one read, and one more for the end


def _read(path: str) -> str:
    """A cgroup file, whole: without a text wrapper, as each run reads four of them."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, _READ_CHUNK):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(fd)


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _field(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


class SandboxCgroup:
    """The engine's handle on one sandbox's cgroups (a worker's or a session holder's)."""

    def __init__(
        self,
        paths: dict[str, str],
        version: int,
        memory_bytes: int,
        pids: int,
        kills_at_exit: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        self.paths = paths
        """Folder per hierarchy name."""
        self._kills_at_exit = kills_at_exit
        self._version = version
        self._memory = memory_bytes
        self._pids = pids
        self._oom_seen = 0
        self._cpu_seen = 0
        self._primed = False
        self._open: dict[str, int] = {}
        """The counters each run reads, by file name, once opened by ``prime``."""

    def _path(self, controller: str, name: str) -> str | None:
        folder = self._folders.get(controller)
        return None if folder is None else f"{folder}/{name}"

    def _counter(self, controller: str, name: str) -> str | None:
        """A counter file's text (None: the sandbox has no such controller).

        Raises:
            OSError: it cannot be read (its cgroup is gone).
        """
        fd = self._open.get(name)
        if fd is not None:
            return os.pread(fd, _COUNTER_BYTES, 0).decode()
        path = self._path(controller, name)
        return None if path is None else _read(path)

    @functools.cached_property
    def _folders(self) -> dict[str, str]:
        """Its folder per controller (v2: the one folder for each)."""
        if self._version == 2:
            (folder,) = self.paths.values()
            return dict.fromkeys(WANTED_CONTROLLERS, folder)
        return {c: path for hierarchy, path in self.paths.items() for c in hierarchy.split(",")}

    def fit(self, *, memory_bytes: int, pids: int) -> None:
        """Make the limits these (a run that asks for other ones than the pool's).

        Raises:
            OSError: the kernel refused (the sandbox already holds more than that).
        """
        if memory_bytes != self._memory:
            wall, now = memory_bytes + RUNTIME_ALLOWANCE, self._memory + RUNTIME_ALLOWANCE
            for name, value in memory_knobs(self._version, wall, now):
                path = self._path("memory", name)
                if path is not None and os.path.exists(path):
                    _write(path, value)
            self._memory = memory_bytes
        if pids != self._pids:
            path = self._path("pids", "pids.max")
            if path is not None:
                _write(path, str(pids))
            self._pids = pids

    @property
    def memory_limit(self) -> int:
        return self._memory

    def oom_kills(self) -> int | None:
        """How many of its processes the kernel has killed for memory so far; None once the
        cgroup is gone (its sandbox was reaped)."""
        try:
            text = self._counter("memory", self._oom_file)
            return 0 if text is None else _field(text, "oom_kill")
        except (OSError, ValueError):
            return None

    @property
    def _oom_file(self) -> str:
        return "memory.events" if self._version == 2 else "memory.oom_control"

    @property
    def _cpu_file(self) -> tuple[str, str]:
        return ("cpu", "cpu.stat") if self._version == 2 else ("cpuacct", "cpuacct.usage")

    def begin_run(self) -> None:
        """Mark the start of a run: ``end_run`` counts from here (a cgroup the zygote reused
        still counts the kills of the workers it held before). After ``prime``, the next call
        keeps that reading instead."""
        if self._primed:
            self._primed = False
            return
        self._oom_seen = self.oom_kills() or 0
        self._cpu_seen = self.cpu_ns()  # a fresh one's start-up is not its run's

    def prime(self) -> None:
        """``begin_run`` now, for a worker that is ready and waits idle for its run: reading
        the counters off the run's path, which they cost 0.1 ms of latency; an idle worker
        uses no CPU and allocates nothing until its request comes. The two counters stay
        open for ``end_run`` until ``close``.

        The files are those of the cgroup, not of its name: if the worker dies before its
        run is read, and the zygote gives its cgroup to the next worker, ``end_run`` still
        sees the kills of this one (the counts only grow), and a few milliseconds of the
        next one's start-up among its CPU."""
        for controller, name in ("memory", self._oom_file), self._cpu_file:
            path = self._path(controller, name)
            if path is not None and name not in self._open:
                with contextlib.suppress(OSError):  # read by path, as without
                    self._open[name] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.begin_run()
        self._primed = True

    def close(self) -> None:
        """Close the counters ``prime`` opened (the readings go by path again); idempotent."""
        opened, self._open = self._open, {}
        for fd in opened.values():
            os.close(fd)

    async def end_run(self) -> tuple[int, int]:
        """(processes the kernel killed for memory, CPU nanoseconds) since ``begin_run``.

        A sandbox that died under the run (the kernel killed its first process) may be
        reaped, and its cgroup gone, before this reads it: the zygote reported its kills
        on the way out, and those are asked for instead.
        """
        kills = self.oom_kills()
        cpu = self.cpu_ns()
        if kills is None:
            found = 0 if self._kills_at_exit is None else await self._kills_at_exit()
            return max(found - self._oom_seen, 0), 0
        new_kills, self._oom_seen = max(kills - self._oom_seen, 0), kills
        used, self._cpu_seen = max(cpu - self._cpu_seen, 0), cpu
        return new_kills, used

    def cpu_ns(self) -> int:
        """CPU time its processes have used, in nanoseconds."""
        try:
            text = self._counter(*self._cpu_file)
            if text is None:
                return 0
            return _field(text, "usage_usec") * 1000 if self._version == 2 else int(text)
        except (OSError, ValueError):
            return 0

    def memory_bytes(self) -> int:
        """What its processes and their kernel objects hold now."""
        name = "memory.current" if self._version == 2 else "memory.usage_in_bytes"
        path = self._path("memory", name)
        try:
            return 0 if path is None else int(_read(path))
        except (OSError, ValueError):
            return 0

    def memory_cache_bytes(self) -> int:
        """The part of ``memory_bytes`` that is file pages (tmpfs files among them)."""
        path = self._path("memory", "memory.stat")
        key = "file" if self._version == 2 else "cache"
        try:
            return 0 if path is None else _field(_read(path), key)
        except (OSError, ValueError):
            return 0

    def can_freeze(self) -> bool:
        """Whether this sandbox's processes can be frozen (v1 freezer or v2 cgroup.freeze)."""
        path = self._freeze_path()
        return path is not None and os.path.exists(path)

    def _freeze_path(self) -> str | None:
        if self._version == 2:
            return self._path("memory", "cgroup.freeze")
        return self._path("freezer", "freezer.state")

    def set_frozen(self, frozen: bool) -> None:
        """Freeze (no CPU at all, every process stopped where it is) or thaw the sandbox.

        Raises:
            OSError: the kernel refused, or the sandbox has no freezer.
        """
        path = self._freeze_path()
        if path is None:
            raise OSError(errno.ENOTSUP, "this sandbox has no freezer cgroup")
        if self._version == 2:
            _write(path, "1" if frozen else "0")
        else:
            _write(path, "FROZEN" if frozen else "THAWED")

    def frozen(self) -> bool | None:
        """True once every process is frozen, False when thawed, None while in between (v1's
        FREEZING; v2's events not yet settled) or gone."""
        path = self._freeze_path()
        try:
            if path is None:
                return None
            if self._version == 2:
                events = _read(os.path.join(os.path.dirname(path), "cgroup.events"))
                return _field(events, "frozen") == 1
            state = _read(path).strip()
        except (OSError, ValueError):
            return None
        return {"FROZEN": True, "THAWED": False}.get(state)

    def processes(self) -> list[int]:
        """The pids in it (host pids; they may be gone by the time they are read)."""
        path = self._path("pids" if self._version == 1 else "memory", "cgroup.procs")
        try:
            return [] if path is None else [int(p) for p in _read(path).split()]
        except (OSError, ValueError):
            return []


def memory_knobs(version: int, limit: int, current: int | None = None) -> list[tuple[str, str]]:
    """The memory files that bound a sandbox to ``limit`` bytes, in an order the kernel
    accepts coming from ``current`` (v1 needs memory <= memory+swap at every step)."""
    if version == 2:
        return [("memory.max", str(limit)), ("memory.swap.max", "0")]
    tcp = max(limit // _TCP_SHARE, _MIN_TCP_BYTES)
    knobs = [("memory.limit_in_bytes", str(limit)), ("memory.memsw.limit_in_bytes", str(limit))]
    if current is not None and limit > current:
        knobs.reverse()
    return [*knobs, ("memory.kmem.tcp.limit_in_bytes", str(tcp))]


class CgroupTree:
    """One engine's cgroups (see the module's docstring for the layout)."""

    def __init__(
        self, hierarchies: Sequence[Hierarchy], *, capacity: int, cpu_quota: float
    ) -> None:
        self.hierarchies = tuple(hierarchies)
        self.version = self.hierarchies[0].version
        self.name = f"corral-{os.getpid()}-{next(_names)}"
        self._capacity = capacity
        self._cpu_quota = cpu_quota
        self._knobs: dict[tuple[int, int], tuple[CgroupKnob, ...]] = {}
        """Per (memory, pids), the knobs made once: every spawn asks, a few distinct ones."""
        self._folders_by_zygote: dict[int, tuple[tuple[str, str], ...]] = {}
        self.roots = {h.name: os.path.join(h.path, self.name) for h in self.hierarchies}

    @property
    def controllers(self) -> frozenset[str]:
        if self.version == 2:
            return frozenset(_V2_CONTROLLERS) & self.hierarchies[0].controllers | {"freezer"}
        return frozenset().union(*(h.controllers for h in self.hierarchies))

    @classmethod
    def create(cls, *, capacity: int, cpu_quota: float = 0.0, parent: str = "") -> CgroupTree:
        """Discover the hierarchies, sweep trees dead engines left, make this one's.

        Raises:
            IsolationError: cgroups cannot be used here (the reason says why).
        """
        if os.geteuid() != 0:
            raise IsolationError("corral is not root, so it cannot make cgroups")
        tree = cls(discover(parent), capacity=capacity, cpu_quota=cpu_quota)
        for hierarchy in tree.hierarchies:
            # First, in every hierarchy: what a dead engine left frozen (v1's freezer is a
            # hierarchy of its own) must thaw before a kill in another one can end it.
            _sweep_dead_trees(hierarchy.path, thaw_only=True)
        for hierarchy in tree.hierarchies:
            _sweep_dead_trees(hierarchy.path)
        made: list[str] = []
        try:
            for hierarchy in tree.hierarchies:
                path = tree.roots[hierarchy.name]
                os.mkdir(path, 0o755)
                made.append(path)
                if tree.version == 1 and "cpu" in hierarchy.controllers:
                    # All sandboxes together weigh on the host as ``capacity`` busy processes
                    # would without cgroups, not as one.
                    _write(os.path.join(path, "cpu.shares"), str(_SHARES * capacity))
            if tree.version == 2:
                controllers = " ".join(f"+{c}" for c in _V2_CONTROLLERS)
                _write(os.path.join(tree.roots["unified"], "cgroup.subtree_control"), controllers)
        except OSError as exc:
            for path in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(path)
            raise IsolationError(f"cannot make corral's cgroups: {exc}") from exc
        return tree

    # what the zygote makes ---------------------------------------------------------------

    def knobs(self, *, memory_bytes: int, pids: int) -> tuple[CgroupKnob, ...]:
        """The files of a new sandbox's cgroup: its memory, pids and CPU bounds."""
        known = self._knobs.get((memory_bytes, pids))
        if known is None:
            if len(self._knobs) >= _KNOWN_KNOB_SETS:
                self._knobs.clear()
            known = self._knobs[memory_bytes, pids] = self._make_knobs(memory_bytes, pids)
        return known

    def _make_knobs(self, memory_bytes: int, pids: int) -> tuple[CgroupKnob, ...]:
        out: list[CgroupKnob] = []
        for hierarchy in self.hierarchies:
            controllers = hierarchy.controllers if self.version == 1 else set(_V2_CONTROLLERS)
            for name, value in self._knobs_for(controllers, memory_bytes, pids):
                out.append(CgroupKnob(hierarchy=hierarchy.name, name=name, value=value))
        return tuple(out)

    def _knobs_for(
        self, controllers: frozenset[str] | set[str], memory_bytes: int, pids: int
    ) -> Iterator[tuple[str, str]]:
        if "memory" in controllers:
            for name, value in memory_knobs(self.version, memory_bytes + RUNTIME_ALLOWANCE):
                if self.version == 2 or self._v1_has(name):
                    yield name, value
        if "pids" in controllers:
            yield "pids.max", str(pids)
        if "cpu" in controllers and self._cpu_quota > 0:
            quota = max(1000, round(self._cpu_quota * _CFS_PERIOD_US))
            if self.version == 2:
                yield "cpu.max", f"{quota} {_CFS_PERIOD_US}"
            else:
                yield "cpu.cfs_quota_us", str(quota)

    def _v1_has(self, name: str) -> bool:
        memory = next((h for h in self.hierarchies if "memory" in h.controllers), None)
        return memory is not None and os.path.exists(os.path.join(memory.path, name))

    def group_knobs(self) -> tuple[CgroupKnob, ...]:
        if self.version == 1:
            return ()
        controllers = " ".join(f"+{c}" for c in _V2_CONTROLLERS)
        return (CgroupKnob(hierarchy="unified", name="cgroup.subtree_control", value=controllers),)

    def delegate(self, zygote_uid: int, zygote_pid: int) -> tuple[UseCgroups, list[int]]:
        """Make the zygote's folder in every hierarchy and give it to the zygote's uid.

        Returns the message that hands the folders over and their descriptors (the caller
        sends, then closes them).

        Raises:
            OSError: the folders could not be made.
        """
        fds: list[int] = []
        try:
            for hierarchy in self.hierarchies:
                folder = self._zygote_folder(hierarchy.name, zygote_uid)
                os.mkdir(folder, 0o755)
                if self.version == 1 and "cpu" in hierarchy.controllers:
                    # Its one-shot workers are at most ``capacity`` sandboxes running at once.
                    _write(os.path.join(folder, "cpu.shares"), str(_SHARES * self._capacity))
                if self.version == 2:
                    self._delegate_v2(folder, zygote_uid, zygote_pid)
                os.chown(folder, zygote_uid, zygote_uid)
                fds.append(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        names = tuple(h.name for h in self.hierarchies)
        memory = next(h.name for h in self.hierarchies if "memory" in h.controllers)
        events = "memory.events" if self.version == 2 else "memory.oom_control"
        message = UseCgroups(
            hierarchies=names, group_knobs=self.group_knobs(), oom_events=(memory, events)
        )
        return message, fds

    def _delegate_v2(self, folder: str, zygote_uid: int, zygote_pid: int) -> None:
        weight = min(_WEIGHT * self._capacity, _MAX_WEIGHT)
        _write(os.path.join(folder, "cpu.weight"), str(weight))
        controllers = " ".join(f"+{c}" for c in _V2_CONTROLLERS)
        _write(os.path.join(folder, "cgroup.subtree_control"), controllers)
        own = os.path.join(folder, "zygote")
        os.mkdir(own, 0o755)
        _write(os.path.join(own, "cgroup.procs"), str(zygote_pid))
        for name in ("cgroup.procs", "cgroup.subtree_control", "cgroup.threads"):
            os.chown(os.path.join(folder, name), zygote_uid, zygote_uid)

    def _zygote_folder(self, hierarchy: str, zygote_uid: int) -> str:
        return os.path.join(self.roots[hierarchy], f"z{zygote_uid}")

    def sandbox(
        self,
        zygote_uid: int,
        uid: int,
        *,
        group: str | None,
        memory_bytes: int,
        pids: int,
        kills_at_exit: Callable[[], Awaitable[int]] | None = None,
    ) -> SandboxCgroup:
        """The handle on the cgroups the zygote made for the worker with host ``uid``."""
        name = worker_cgroup_name(uid)
        paths = {
            hierarchy: f"{folder}/{group}/{name}" if group else f"{folder}/{name}"
            for hierarchy, folder in self._zygote_folders(zygote_uid)
        }
        return SandboxCgroup(paths, self.version, memory_bytes, pids, kills_at_exit)

    def _zygote_folders(self, zygote_uid: int) -> tuple[tuple[str, str], ...]:
        """(hierarchy, the zygote's folder in it) for each hierarchy: every run asks."""
        known = self._folders_by_zygote.get(zygote_uid)
        if known is None:
            if len(self._folders_by_zygote) >= _KNOWN_ZYGOTES:
                self._folders_by_zygote.clear()
            known = tuple(
                (h.name, self._zygote_folder(h.name, zygote_uid)) for h in self.hierarchies
            )
            self._folders_by_zygote[zygote_uid] = known
        return known

    def group_cpu_ns(self, zygote_uid: int, group: str) -> int:
        """CPU time of every session a group has had since its folder was made."""
        paths = {
            h.name: os.path.join(self._zygote_folder(h.name, zygote_uid), group)
            for h in self.hierarchies
        }
        return SandboxCgroup(paths, self.version, 0, 0).cpu_ns()

    # removal -----------------------------------------------------------------------------

    def remove_zygote(self, zygote_uid: int) -> None:
        """Remove a zygote's folders once it is gone (killing whatever is left in them)."""
        for hierarchy in self.hierarchies:
            _remove_tree(self._zygote_folder(hierarchy.name, zygote_uid))

    def close(self) -> None:
        """Remove the whole tree (the engine's zygotes are gone)."""
        for path in self.roots.values():
            _remove_tree(path)


def _sweep_dead_trees(parent: str, *, thaw_only: bool = False) -> None:
    """Remove ``corral-<pid>-<n>`` trees whose engine is dead; never another's folder.
    ``thaw_only``: only thaw what they hold frozen."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        match = _TREE_NAME.fullmatch(name)
        if match is None or os.path.exists(f"/proc/{match.group(1)}"):
            continue
        if thaw_only:
            for folder, _subfolders, _files in os.walk(os.path.join(parent, name)):
                _thaw(folder)
            continue
        logger.info("removing the cgroups of a corral that is gone: %s/%s", parent, name)
        # A corral without rights over the leftover (one in a user namespace of its own, say)
        # leaves it to the next one that has them: that is not its own run's failure.
        _remove_tree(os.path.join(parent, name), denied_level=logging.INFO)


def _remove_tree(path: str, *, denied_level: int = logging.ERROR) -> None:
    """Remove ``path`` and its sub-folders, deepest first, killing what still runs in them.

    ``denied_level``: how loudly to log a folder that this process has no right to remove.
    """
    if not os.path.isdir(path):
        return
    for folder, _subfolders, _files in os.walk(path, topdown=False):
        for attempt in range(_REMOVE_ATTEMPTS):
            try:
                os.rmdir(folder)
                break
            except FileNotFoundError:
                break
            except PermissionError as exc:  # so its parents cannot go either
                logger.log(denied_level, "cannot remove cgroup %s: %s", folder, exc)
                return
            except OSError as exc:
                if attempt == _REMOVE_ATTEMPTS - 1:
                    logger.error("cannot remove cgroup %s: %s", folder, exc)
                else:
                    _kill_members(folder)


def _thaw(folder: str) -> None:
    """Thaw a paused sandbox's cgroup: its processes die only once thawed (v1 holds even
    SIGKILL back)."""
    for name, value in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
        with contextlib.suppress(OSError):
            if os.path.exists(os.path.join(folder, name)):
                _write(os.path.join(folder, name), value)


def _members(folder: str) -> set[int]:
    try:
        return {int(p) for p in _read(os.path.join(folder, "cgroup.procs")).split()}
    except (OSError, ValueError):
        return set()


def _kill_members(folder: str) -> None:
    """SIGKILL every process still in the cgroup ``folder`` and wait (bounded) for each.

    A pid read from ``cgroup.procs`` might be reused before it is signalled: each is opened
    as a pidfd first, and signalled only if ``cgroup.procs`` still lists it after that, so
    the pidfd can only be one of the sandbox's own processes. A process that is exiting
    already is waited for all the same: until it is gone the kernel keeps its cgroup busy.
    """
    opened: dict[int, int] = {}
    _thaw(folder)
    try:
        for pid in _members(folder):
            with contextlib.suppress(OSError):  # gone already
                opened[pid] = os.pidfd_open(pid)
        still = _members(folder)
        poller = select.poll()
        for pid, pidfd in opened.items():
            if pid in still:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                poller.register(pidfd, select.POLLIN)
        pending = len(still & opened.keys())
        while pending:
            events = poller.poll(int(_KILL_WAIT * 1000))
            if not events:
                break
            for fd, _ in events:
                poller.unregister(fd)
                pending -= 1
    finally:
        for pidfd in opened.values():
            os.close(pidfd)

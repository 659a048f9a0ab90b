"""Runs of a program its caller runs again and again: forked from a case server kept for it.

An RL trainer sends each test case of a problem as a call of its own (``/run_code``, one per
case, from a pool of threads): the same program, many stdins. ``Engine.run_case`` gives such a
call the result a fresh worker would, and once the program repeats it forks the case from a
case server kept for that caller's program (``corral.engine._cases``), as ``run_cases`` does
for a batch, instead of paying for a new interpreter state every time.

* A program's first call, or one after ``REPEAT_WINDOW`` without a call, runs in a fresh
  worker: making a case server costs a few cases' worth of CPU, which only a repeat repays.
* A program has at most ``capacity`` case servers (more could not run at once), and the
  engine at most ``2 * capacity`` in all; a call that finds its program's servers busy waits
  for one within its queue timeout (without one it runs fresh, since queue and run then
  share its timeout), and a call that finds no room at all runs fresh. A freed server goes
  to the call that has waited longest, not to whichever call comes next.
* A server is kept per (tenant, program): a tenant's cases never fork from a server another
  tenant's call made. One unused for ``IDLE_SECONDS`` is closed, as are all at engine close.
* Every case takes a slot of the fair scheduler, as any run. Calls waiting for their
  program's servers count against the scheduler's bounds (``queue_size`` and
  ``max_queued_per_tenant``) as if they waited in its queue: past them a call runs fresh,
  and so gets the scheduler's ``busy``, as any run would.
* A kept server found dead when a call takes it is dropped and the next one (or a new one)
  taken: its death is nobody's result.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from corral._limits import Limits
from corral.engine._cases import Case, Lane, run_on_lane
from corral.engine._feed import Feed
from corral.engine._result import ExecutionResult
from corral.engine._runs import RunOptions, Runs, Target
from corral.engine._waiters import WaitQueue
from corral.sandbox import Launch

if TYPE_CHECKING:
    from corral.engine._fresh import WorkerSource

__all__ = ["IDLE_SECONDS", "REPEAT_WINDOW", "Repeats"]

REPEAT_WINDOW = 30.0
"""Seconds since a program's last call within which another call counts as a repeat."""
IDLE_SECONDS = 5.0
"""Seconds a kept case server may stand unused before it is closed."""
_REMEMBERED = 4096
"""Programs whose last call is remembered (the oldest is forgotten first)."""
_SERVERS_PER_SLOT = 2
"""Case servers kept in all, per slot of the engine's capacity."""

_Key = tuple[str, bytes]


@dataclass(slots=True)
class _Program:
    """One tenant's program: its case servers, idle ones last used first, and the calls
    waiting for one, first come first served: each is handed a server, or None to make one."""

    lanes: int = 0
    idle: list[tuple[Lane, float]] = field(default_factory=list)
    waiters: WaitQueue[Lane | None] = field(default_factory=WaitQueue)


class Repeats:
    """Case servers kept for repeated programs, and the calls that use them."""

    def __init__(
        self,
        workers: WorkerSource,
        runs: Runs,
        fresh: Target,
        *,
        capacity: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._workers = workers
        self._runs = runs
        self._fresh = fresh
        self._capacity = capacity
        self._clock = clock
        self._last_call: OrderedDict[_Key, float] = OrderedDict()
        self._programs: dict[_Key, _Program] = {}
        self._lanes = 0
        self._waiting: Counter[str] = Counter()

    @property
    def servers(self) -> int:
        """Case servers kept now, busy or idle."""
        return self._lanes

    def _repeated(self, key: _Key, now: float) -> bool:
        last = self._last_call.pop(key, None)
        self._last_call[key] = now
        while len(self._last_call) > _REMEMBERED:
            self._last_call.popitem(last=False)
        return last is not None and now - last <= REPEAT_WINDOW

    def _room(self) -> bool:
        """Whether one more server may be made, closing the longest idle one if need be."""
        most = _SERVERS_PER_SLOT * self._capacity
        if self._lanes < most:
            return True
        oldest: tuple[float, _Key] | None = None
        for key, program in self._programs.items():
            if program.idle and (oldest is None or program.idle[0][1] < oldest[0]):
                oldest = (program.idle[0][1], key)
        if oldest is None:
            return False
        self._drop(self._programs[oldest[1]], oldest[1], 0)
        return True

    def _drop(self, program: _Program, key: _Key, index: int) -> None:
        lane, _ = program.idle.pop(index)
        self._forget(program, key, lane)

    async def _lane(
        self, key: _Key, code: str, *, wait: bool, launch: Launch | None = None
    ) -> Lane | None:
        """An idle or new case server for the program, waiting (if ``wait``) for one of its
        own if they are all busy; None when the call is to run fresh."""
        repeated = self._repeated(key, self._clock())
        if key not in self._programs and not repeated:
            return None
        woken = False
        while True:
            program = self._programs.setdefault(key, _Program())
            if program.idle:
                lane = program.idle.pop()[0]
                if lane.alive():
                    return lane
                self._forget(program, key, lane, wake=False)  # this call makes the next one
                continue
            if program.lanes < self._capacity and self._room():
                program.lanes += 1
                self._lanes += 1
                return Lane(self._workers, self._runs, code, launch)
            if not program.lanes or not wait or not self._may_wait(key[0]):
                if not program.lanes:
                    # No server of the program is left to free: those waiting run fresh too.
                    while program.waiters.grant(None):
                        pass
                    self._settle(program, key)
                return None
            self._waiting[key[0]] += 1
            try:
                # Woken to make a server and beaten to it, a call keeps its place in line.
                handed = await program.waiters.wait(
                    functools.partial(self._pass_on, program, key), first=woken
                )
            except BaseException:
                self._settle(program, key)
                raise
            finally:
                self._waiting[key[0]] -= 1
                if not self._waiting[key[0]]:
                    del self._waiting[key[0]]
            woken = True
            if handed is not None:
                if handed.alive():
                    return handed
                self._forget(program, key, handed, wake=False)  # this call replaces it
            # Woken without one: a server of the program closed, so one may be made now.

    def _may_wait(self, tenant: str) -> bool:
        """Whether one more call may wait, as the scheduler's queue bounds would let it."""
        scheduler = self._runs.scheduler
        queued = scheduler.statistics().queued + self._waiting.total()
        mine = scheduler.queued_for(tenant) + self._waiting[tenant]
        return queued < scheduler.queue_size and mine < scheduler.max_queued_per_tenant

    def _forget(self, program: _Program, key: _Key, lane: Lane, *, wake: bool = True) -> None:
        lane.close()
        self._lanes -= 1
        program.lanes -= 1
        if wake:
            self._wake_next(program, key)  # it may make a server in this one's place
        else:
            self._settle(program, key)

    def _wake_next(self, program: _Program, key: _Key) -> None:
        program.waiters.grant(None)
        self._settle(program, key)

    def _pass_on(self, program: _Program, key: _Key, lane: Lane | None) -> None:
        """A call gave up as it was served: the next in line is served instead."""
        if lane is not None:
            self._give_back(key, lane, keep=True)
        else:
            self._wake_next(program, key)

    def _settle(self, program: _Program, key: _Key) -> None:
        """Forget a program with no server and nobody waiting for one."""
        if not program.lanes and not program.waiters and self._programs.get(key) is program:
            del self._programs[key]

    def _give_back(self, key: _Key, lane: Lane, keep: bool) -> None:
        """A call is done with ``lane``: the longest waiting call gets it, else it idles."""
        program = self._programs[key]
        if not (keep and self._runs.open):
            self._forget(program, key, lane)
        elif not program.waiters.grant(lane):
            program.idle.append((lane, self._clock()))

    async def run(
        self,
        code: str,
        case: Case,
        *,
        limits: Limits,
        files: Mapping[str, bytes],
        queue_timeout: float | None,
        tenant: str,
        launch: Launch | None = None,
    ) -> ExecutionResult:
        """One call's result: from a kept case server when the program repeats (its cases
        exec ``launch`` when given; the first call runs ``code``, its driver, fresh)."""
        feed = Feed(case.stdin, files)  # a stdin that is not bytes fails here, before a wait
        key = (tenant, hashlib.sha256(code.encode("utf-8", "surrogatepass")).digest())
        started = anyio.current_time()
        lane: Lane | None = None
        if queue_timeout is None:
            # Queue and run then share the run's timeout, as for ``run``: no wait for a busy
            # server, which would not count against it.
            lane = await self._lane(key, code, wait=False, launch=launch)
        else:
            with anyio.move_on_after(queue_timeout):
                lane = await self._lane(key, code, wait=True, launch=launch)
            queue_timeout = max(0.0, queue_timeout - (anyio.current_time() - started))
        if lane is None:
            options = RunOptions(
                limits=case.limits or limits,
                tenant=tenant,
                feed=feed,
                queue_timeout=queue_timeout,
            )
            return await self._runs.run(self._fresh, code, options)
        keep = False
        try:
            result = await run_on_lane(
                self._runs,
                lane,
                code,
                feed,
                limits=case.limits or limits,
                queue_timeout=queue_timeout,
                tenant=tenant,
            )
            keep = lane.serving
            return result
        finally:
            self._give_back(key, lane, keep)

    def expire(self) -> None:
        """Close every case server unused for ``IDLE_SECONDS``."""
        now = self._clock()
        for key, program in list(self._programs.items()):
            for index in reversed(range(len(program.idle))):
                if now - program.idle[index][1] >= IDLE_SECONDS:
                    self._drop(program, key, index)
                    if key not in self._programs:
                        break

    async def expire_loop(self) -> None:
        while True:
            await anyio.sleep(IDLE_SECONDS / 2)
            self.expire()

    def close_all(self) -> None:
        for key, program in list(self._programs.items()):
            while program.idle and key in self._programs:
                self._drop(program, key, len(program.idle) - 1)

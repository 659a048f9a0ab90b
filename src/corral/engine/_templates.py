"""Template zygotes: one worker supply per template in use, started at its first use.

A template's zygote is the engine's own (the same isolation, walls and uids), its sandboxes
given the template's layer read-only, its environment and working folder, its files copied
into each sandbox's home as it is made (``sandbox.inside._isolate``), and its workers its
preload list (imported inside each sandbox, never by the zygote). Each supply has its own warm
pool, so a run from a warm template costs what a default run does. At most ``max_live`` are up
at once: a new one closes the least recently used idle one first, and one idle for
``idle_timeout`` seconds (no run, no live session from it) is closed. A template rebuilt
meanwhile gets a new zygote at its next use; sessions of the old one keep theirs until they end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import anyio
import anyio.abc
import anyio.to_thread

from corral._limits import Limits
from corral._uids import UidRange
from corral.engine._fresh import FreshRun, FreshWorkers
from corral.engine._network import Networks
from corral.engine._runs import Runs
from corral.engine._session import Session
from corral.engine._supply import WorkerSupply
from corral.errors import Busy, ZygoteUnavailable
from corral.sandbox import CgroupTree, HolderLike, SandboxBackend, SandboxFiles, key_group
from corral.templates import Template, TemplateStore

__all__ = ["TemplateSupplies", "TemplateZygote"]

logger = logging.getLogger("corral.engine")

_MAX_TICK = 1.0  # seconds between idle checks at most


@dataclass(eq=False, slots=True)
class TemplateZygote:
    """One template's running supply and its one-shot target."""

    template: Template
    supply: WorkerSupply
    fresh: FreshRun
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    last_used: float = field(default_factory=time.monotonic)
    sessions: list[Session] = field(default_factory=list)
    runs: int = 0
    """Runs of it in flight (a supply is never closed under one)."""

    @property
    def idle(self) -> bool:
        self.sessions[:] = [s for s in self.sessions if not s.closed]
        return not self.sessions and not self.runs


class TemplateSupplies:
    """The engine's template zygotes by name."""

    def __init__(
        self,
        store: TemplateStore,
        *,
        backend: SandboxBackend,
        limits: Limits,
        pool_size: int,
        uids: UidRange,
        full_preload: tuple[str, ...],
        lean_preload: tuple[str, ...],
        prewarm: bool,
        runs: Runs,
        networks: Networks,
        max_live: int,
        idle_timeout: float,
    ) -> None:
        self.store = store
        self._backend = backend
        self._limits = limits
        self._pool_size = pool_size
        self._uids = uids
        self._preload = {"code-interpreter-v1": full_preload, "base": lean_preload}
        self._prewarm = prewarm
        self._runs = runs
        self._networks = networks
        self.max_live = max_live
        self.idle_timeout = idle_timeout
        self.files = SandboxFiles()
        self.cgroups: CgroupTree | None = None
        self._live: dict[str, TemplateZygote] = {}
        self._retired: list[TemplateZygote] = []
        self._lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self.started = 0
        """Template zygotes started so far (benchmarks and tests)."""
        self._running = 0

    def set_running(self, running: int) -> None:
        """Runs in flight, engine-wide: every pool refills below its low water only while
        nothing runs, as the default ones do (a refill would take a running cell's CPU)."""
        self._running = running
        for zygote in self._live.values():
            zygote.supply.set_running(running)

    def live(self) -> dict[str, TemplateZygote]:
        """The running template zygotes by name."""
        return dict(self._live)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled: the supplies' tasks live here; idle ones are closed."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            while True:
                await anyio.sleep(min(_MAX_TICK, self.idle_timeout / 4))
                await self.close_idle()

    async def use(self, name: str, tenant: str) -> TemplateZygote:
        """``name``'s zygote, started if it is not up (or its template was rebuilt).

        Raises:
            TemplateNotFound: no such template, or not ``tenant``'s to use.
            Busy: ``max_live`` templates are in use, none of them idle.
            IsolationError, ZygoteUnavailable: its zygote could not start.
        """
        template = self.store.get(name, tenant)
        live = self._live.get(name)
        if live is None or live.template.build_id != template.build_id:
            async with self._lock:
                live = self._live.get(name)
                if live is None or live.template.build_id != template.build_id:
                    live = await self._start(template)
        live.last_used = time.monotonic()
        return live

    async def _start(self, template: Template) -> TemplateZygote:
        old = self._live.pop(template.name, None)
        if old is not None:
            self._retired.append(old)  # closed once its sessions end
        while len(self._live) >= self.max_live:
            idle = [z for z in self._live.values() if z.idle]
            if not idle:
                raise Busy(f"{self.max_live} templates are in use; try again later")
            await self._close(min(idle, key=lambda z: z.last_used))
        supply = WorkerSupply(
            self._backend, self._preload[template.base], self._limits, self._pool_size,
            self._uids, prewarm=self._prewarm,
        )  # fmt: skip
        supply.files = dataclasses.replace(
            self.files,
            layer=str(template.layer),
            layer_env=template.env,
            layer_workdir=template.workdir,
            layer_preload=template.preload,
        )
        supply.cgroups = self.cgroups
        supply.set_running(self._running)
        workers = FreshWorkers(supply, None, self._limits.work_bytes)
        zygote = TemplateZygote(template, supply, FreshRun(workers, self._runs, self._networks))
        assert self._tg is not None
        await self._tg.start(self._serve, zygote)
        self._live[template.name] = zygote
        self.started += 1
        logger.info("template %s: its zygote started", template.name)
        return zygote

    async def _serve(
        self, zygote: TemplateZygote, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        with zygote.scope:
            await zygote.supply.run(task_status=task_status)

    async def _close(self, zygote: TemplateZygote) -> None:
        if self._live.get(zygote.template.name) is zygote:
            del self._live[zygote.template.name]
        with anyio.CancelScope(shield=True):
            await zygote.supply.aclose()
            await anyio.to_thread.run_sync(self.store.retire, zygote.template)
        zygote.scope.cancel()
        logger.info("template %s: zygote closed", zygote.template.name)

    async def close_idle(self) -> None:
        cutoff = time.monotonic() - self.idle_timeout
        for zygote in list(self._live.values()):
            if zygote.idle and zygote.last_used < cutoff:
                await self._close(zygote)
        for zygote in list(self._retired):
            if zygote.idle:
                self._retired.remove(zygote)
                await self._close(zygote)

    async def aclose(self) -> None:
        for zygote in [*self._live.values(), *self._retired]:
            await self._close(zygote)
        self._retired.clear()

    @contextlib.contextmanager
    def running(self, zygote: TemplateZygote) -> Iterator[None]:
        zygote.runs += 1
        try:
            yield
        finally:
            zygote.runs -= 1
            zygote.last_used = time.monotonic()

    def holder_spawner(
        self, zygote: TemplateZygote, disk_bytes: int
    ) -> Callable[[str, Limits], Awaitable[HolderLike]]:
        async def spawn(tenant: str, limits: Limits) -> HolderLike:
            handle = zygote.supply.zygote
            if handle is None:
                raise ZygoteUnavailable(f"template {zygote.template.name}: {zygote.supply.failure}")
            return await handle.spawn_holder(
                disk_bytes,
                memory_bytes=limits.memory_bytes,
                group=key_group(tenant) if tenant else None,
            )

        return spawn

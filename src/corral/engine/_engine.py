"""The Engine: one process-wide scheduler in front of a supervised zygote and warm pool."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import anyio
import anyio.abc
import anyio.to_thread

import corral
from corral._config import Config
from corral._limits import DEFAULT_LIMITS, Limits
from corral._uids import DEFAULT_UID_RANGE, UidRange
from corral.engine._cases import Case, run_cases
from corral.engine._feed import Feed
from corral.engine._fresh import FreshRun, FreshWorkers
from corral.engine._inputs import Input, RunEventSink
from corral.engine._languages import PYTHON_NAMES, Languages, discover_languages
from corral.engine._network import Networks
from corral.engine._packages import DEFAULT_PACKAGES, PackageSources
from corral.engine._programs import Program, Programs, fresh_compile, with_compile
from corral.engine._repeats import Repeats
from corral.engine._result import Evidence, ExecutionResult
from corral.engine._runs import SHUTTING_DOWN, RunOptions, Runs
from corral.engine._scheduler import Scheduler, SchedulerStatistics
from corral.engine._session import IdleAction, Session, SessionManager
from corral.engine._stream import OutputEvent, OutputListener, iterate
from corral.engine._supervisor import supervise
from corral.engine._supply import WorkerSupply, adopt_data_dir
from corral.engine._templates import TemplateSupplies
from corral.errors import IsolationError, ZygoteUnavailable
from corral.network import (
    NO_NETWORK,
    Egress,
    EgressStatistics,
    NetworkCeiling,
    SandboxNetwork,
)
from corral.sandbox import (
    DEFAULT_PRELOAD,
    CgroupTree,
    HolderLike,
    IsolatedBackend,
    SandboxBackend,
    WarmPool,
    ZygoteLike,
    key_group,
)
from corral.templates import Template, TemplateStore

__all__ = ["Engine", "EngineStatistics", "SourceItem"]

SourceItem = str | os.PathLike[str] | bytes | tuple[str, bytes]
"""A source for ``Engine.run(sources=...)``: a file's path, its bytes, or (name, bytes)."""

logger = logging.getLogger("corral.engine")


async def supervise_once(work: Callable[[], Awaitable[object]]) -> None:
    try:
        await work()
    except Exception:
        logger.exception("background work failed")


_MEMORY_POKE = 0.1  # seconds between memory-gate re-checks while jobs wait
_CANCEL_GRACE = 5.0  # seconds for cancelled runs to kill their workers and answer


@dataclass(frozen=True, slots=True)
class EngineStatistics:
    """A snapshot for /health, /metrics and `corral doctor`."""

    capacity: int
    running: int
    queued: int
    queue_size: int
    pool_size: int
    pool_ready: int
    sessions: int
    zygote_restarts: int
    runs_by_outcome: dict[str, int]
    scheduler: SchedulerStatistics
    unavailable: str = ""
    """Why runs cannot be served now ("" when they can)."""
    case_servers: int = 0
    """Case servers kept for repeated programs (``run_case``), busy or idle."""
    cgroups: str = ""
    """Which cgroup controllers bound each sandbox ("v1: cpu, memory, ..."), or why none."""
    cpu_seconds_by_tenant: dict[str, float] = field(default_factory=dict)
    """CPU every sandbox of a tenant has used: runs, cases, sessions with what they left
    running (where cgroups are in force)."""
    background_by_tenant: dict[str, int] = field(default_factory=dict)
    """Processes running in a tenant's sessions beside their interpreters now."""
    egress: EgressStatistics | None = None
    """The egress side's counters (None: this engine gives sandboxes no network)."""


class Engine:
    """Runs untrusted Python in fresh, isolated workers.

    Use as ``async with Engine() as engine:``; ``run`` returns an ``ExecutionResult`` for every
    per-call failure and raises only ``EngineClosed``.

    For an engine that serves one run (``corral run``): ``pool_size=0`` keeps no spare worker
    ready (each run gets one made for it, the first the start-up probe's), and
    ``prewarm=False`` has the zygote load nothing ahead of that run (IPython's formatter on
    first use, no warm-up of pages many workers would share).
    """

    def __init__(
        self,
        *,
        capacity: int | None = None,
        queue_size: int = 256,
        max_queued_per_tenant: int | None = None,
        pool_size: int | None = None,
        limits: Limits = DEFAULT_LIMITS,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        session_idle_timeout: float = 600.0,
        session_disk_bytes: int = 256 * 1024 * 1024,
        min_free_memory: int = 256 * 1024 * 1024,
        lean: bool = True,
        lean_preload: Sequence[str] = (),
        uid_range: tuple[int, int] | UidRange = DEFAULT_UID_RANGE,
        session_data_dir: str | os.PathLike[str] | None = None,
        prewarm: bool = True,
        sandbox_cpu_quota: float = 0.0,
        cgroup_parent: str = "",
        backend: SandboxBackend | None = None,
        egress: Egress | None = None,
        packages: PackageSources = DEFAULT_PACKAGES,
        languages: Languages | None = None,
        templates: TemplateStore | None = None,
        template_zygotes: int = 4,
        template_idle_timeout: float = 300.0,
        paused_dir: str | os.PathLike[str] | None = None,
        session_idle_action: IdleAction = "close",
        paused_ttl: float = 7 * 24 * 3600.0,
        max_paused_per_tenant: int = 64,
    ) -> None:
        self.backend: SandboxBackend = backend or IsolatedBackend()
        """Where workers come from: the isolated sandbox, or the in-process twin (tests)."""
        self.capacity = capacity or os.cpu_count() or 1
        self._cpu_quota = sandbox_cpu_quota
        self._cgroup_parent = cgroup_parent
        self._cgroups: CgroupTree | None = None
        self.cgroups_status = ""
        """Which cgroup controllers bound each sandbox, or why none do (set at start)."""
        self.limits = limits
        self._preload = tuple(preload)
        self._pool_size = pool_size if pool_size is not None else self.capacity
        self._scheduler = Scheduler(
            self.capacity,
            queue_size,
            max_queued_per_tenant=max_queued_per_tenant,
            min_free_memory=min_free_memory,
        )
        self.session_idle_timeout = session_idle_timeout
        self.session_disk_bytes = session_disk_bytes
        uids = uid_range if isinstance(uid_range, UidRange) else UidRange(*uid_range)
        full_uids, lean_uids = uids.split()  # each zygote a block of its own
        # A host folder as every session's /mnt/data (container mode's MOUNT_FOLDER): files
        # outlive the holder, and the folder's own size, not session_disk_bytes, bounds them.
        self._uids = uids
        self._data_dir = None if session_data_dir is None else os.fspath(session_data_dir)
        self._full = WorkerSupply(
            self.backend,
            preload,
            limits,
            self._pool_size,
            full_uids,
            self._data_dir,
            prewarm=prewarm,
        )
        self._lean = (
            WorkerSupply(
                self.backend, lean_preload, limits, self._pool_size, lean_uids, prewarm=prewarm
            )
            if lean
            else None
        )
        self._stack: contextlib.AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._closing = False
        self._runs = Runs(self._scheduler)
        self._workers = FreshWorkers(self._full, self._lean, limits.work_bytes)
        self._networks = Networks(egress)
        # Every sandbox trusts the egress side's CA, when it has one (it adds headers).
        files = packages.sandbox_files(
            "" if egress is None or egress.ca is None else egress.ca.cert_pem
        )
        if not isinstance(self.backend, IsolatedBackend):
            # The twin runs code in this very process: a compiler or a program would run on
            # the host, as whoever runs the engine.
            languages = Languages.none("the in-process twin has no sandbox to run them in")
        self.languages = languages if languages is not None else discover_languages()
        """The languages beyond Python it serves (``run(language=...)``), and why not others."""
        self._programs = Programs(self.languages)
        files = dataclasses.replace(files, toolchains=self.languages.binds())
        for supply in self._supplies():
            supply.files = files
        self.packages = packages
        # Templates (``corral.engine._templates``): a zygote per template in use.
        self.templates = TemplateSupplies(
            templates or TemplateStore(Config().data_dir),  # corral's default data folder
            backend=self.backend, limits=limits, pool_size=self._pool_size, uids=full_uids,
            full_preload=self._preload, lean_preload=tuple(lean_preload), prewarm=prewarm,
            runs=self._runs, networks=self._networks, max_live=template_zygotes,
            idle_timeout=template_idle_timeout,
        )  # fmt: skip
        self.templates.files = files
        self._fresh = FreshRun(self._workers, self._runs, self._networks)
        self._repeats = Repeats(self._workers, self._runs, self._fresh, capacity=self.capacity)
        self._sessions: SessionManager | None = None
        # Pause, snapshots and restarts (engine/_pause.py): where paused state is kept.
        self._paused = (None if paused_dir is None else os.fspath(paused_dir),
                        session_idle_action, paused_ttl, max_paused_per_tenant)  # fmt: skip

    # lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Start the zygote and fill the pool.

        Raises:
            IsolationError: this host cannot build the sandbox (see ``corral doctor``).
            ZygoteUnavailable: the zygote did not start.
        """
        stack = contextlib.AsyncExitStack()
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        try:
            await self._start_cgroups()
            await self._start_zygote()
        except BaseException:
            self._tg.cancel_scope.cancel()
            await stack.aclose()
            await self._close_cgroups()
            raise
        self._stack = stack
        self._sessions = SessionManager(
            self._runs,
            self._spawn_holder,
            self._networks,
            idle_timeout=self.session_idle_timeout,
            disk_bytes=self.session_disk_bytes,
            # The in-process twin would save its host's own globals: it pauses in memory only.
            paused_dir=self._paused[0] if self.backend.isolated else None,
            idle_action=self._paused[1],
            paused_ttl=self._paused[2],
            max_paused=self._paused[3],
        )
        self._sessions.adopt_paused(self.limits)
        self._runs.task_group = self._tg
        self._networks.start(self._tg)
        self._runs.open = True
        self._tg.start_soon(supervise, "the memory gate", self._poke_memory_gate)
        self._tg.start_soon(supervise, "session expiry", self._sessions.expire_loop)
        self._tg.start_soon(supervise, "case server expiry", self._repeats.expire_loop)
        await self._tg.start(self.templates.run)

    async def _start_cgroups(self) -> None:
        def make() -> CgroupTree:
            return self.backend.cgroup_tree(
                capacity=self.capacity, cpu_quota=self._cpu_quota, parent=self._cgroup_parent
            )

        try:
            self._cgroups = await anyio.to_thread.run_sync(make)
        except IsolationError as exc:
            self.cgroups_status = f"not in force: {exc}"
            logger.warning(
                "cgroups are not in force (%s): each process of a sandbox is bounded by "
                "rlimits alone, not the sandbox as a whole",
                exc,
            )
            return
        controllers = ", ".join(sorted(self._cgroups.controllers))
        self.cgroups_status = f"v{self._cgroups.version}: {controllers}"
        for supply in self._supplies():
            supply.cgroups = self._cgroups
        self.templates.cgroups = self._cgroups

    async def _close_cgroups(self) -> None:
        tree, self._cgroups = self._cgroups, None
        if tree is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(tree.close)

    def _supplies(self) -> list[WorkerSupply]:
        return [z for z in (self._full, self._lean) if z is not None]

    async def _start_zygote(self) -> None:
        assert self._tg is not None
        for supply in self._supplies():
            await self._tg.start(supply.run)
        self._scheduler.on_running = self._note_running
        assert self._full.zygote is not None
        hello = self._full.zygote.hello
        python, known = ("?", {}) if hello is None else (hello.python, hello.versions)
        versions = "; ".join(f"{k} {v}" for k, v in sorted(known.items()))
        self._runs.runtime = f"corral {corral.__version__}; python {python}" + (
            f"; {versions}" if versions else ""
        )

    def _note_running(self, running: int) -> None:
        for supply in self._supplies():
            supply.set_running(running)
        self.templates.set_running(running)

    async def _poke_memory_gate(self) -> None:
        while not self._closing:
            await anyio.sleep(_MEMORY_POKE)
            self._scheduler.poke()

    @property
    def unavailable(self) -> str:
        """Why runs cannot be served now ("" when they can): a zygote is down."""
        return "; ".join(z.failure for z in self._supplies() if z.failure)

    async def drain(self, grace: float) -> None:
        """Stop admitting work, let runs in flight finish within ``grace`` seconds, then
        cancel the rest: they end ``cancelled``, "the server is shutting down". Call it
        before ``aclose`` for a graceful stop."""
        self._runs.draining = True
        with anyio.move_on_after(grace):
            await self._runs.wait_idle()
        for job, scope in list(self._runs.live.items()):
            job.stop_reason = SHUTTING_DOWN
            job.cancelled_explicitly = True
            scope.cancel()
        with anyio.move_on_after(_CANCEL_GRACE):
            await self._runs.wait_idle()

    async def aclose(self) -> None:
        """Stop admitting work, stop sessions and workers, stop the zygote; idempotent."""
        if self._stack is None or self._closing:
            return
        self._closing = True
        self._runs.open = False
        with anyio.CancelScope(shield=True):
            if self._sessions is not None:
                await self._sessions.close_all()
            self._repeats.close_all()
            await self.templates.aclose()
            for supply in self._supplies():
                await supply.aclose()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._stack.aclose()
        self._stack = None
        await self._close_cgroups()

    @property
    def _zygote(self) -> ZygoteLike | None:
        """The full zygote's handle (diagnostics and benchmarks)."""
        return self._full.zygote

    @property
    def _pool(self) -> WarmPool | None:
        return self._full.pool

    def _zygote_handles(self) -> dict[str, ZygoteLike]:
        """Every running zygote's handle by flavour, "full" first (diagnostics and benchmarks)."""
        named = {"full": self._full, "lean": self._lean}
        return {k: z.zygote for k, z in named.items() if z is not None and z.zygote is not None}

    @property
    def running(self) -> bool:
        return self._runs.open

    @property
    def network_ceiling(self) -> NetworkCeiling | None:
        """The most any of its sandboxes may reach (None: this engine gives them no network)."""
        egress = self._networks.egress
        return None if egress is None else egress.ceiling

    @property
    def runtime(self) -> str:
        """corral's, Python's and the preloaded libraries' versions, as evidence records them."""
        return self._runs.runtime

    # runs ------------------------------------------------------------------------------

    def evidence(self, code: str, inputs: Sequence[Input], limits: Limits) -> Evidence:
        """What a result for ``code`` records; for callers that refuse a call themselves."""
        return self._runs.evidence(code, inputs, limits)

    async def run(
        self,
        code: str,
        *,
        inputs: Sequence[Input] = (),
        sources: Sequence[SourceItem] = (),
        limits: Limits | None = None,
        argv: Sequence[str] | None = None,
        on_event: RunEventSink | None = None,
        on_output: OutputListener | None = None,
        cancel: anyio.Event | None = None,
        tenant: str = "",
        stdin: bytes | None = None,
        files: Mapping[str, bytes] | None = None,
        queue_timeout: float | None = None,
        network: SandboxNetwork = NO_NETWORK,
        language: str = "python",
        compile_timeout: float | None = None,
        template: str = "",
    ) -> ExecutionResult:
        """Run ``code`` once in a fresh worker.

        Args:
            code: Python source; the value of a trailing expression becomes ``result``.
            inputs: sources mounted read-only under ``/inputs``.
            sources: file paths or bytes to mount as further inputs, each also under its base
                name in the working folder; ``corral.Engine`` ingests them with
                ``corral.sources`` (this layer cannot: it sits below it).
            limits: bounds for this call; the engine's default when None.
            argv: ``sys.argv`` for the code (``[FILE, *args]``, which also sets ``__file__``);
                ``["-c"]`` when None.
            on_event: receives metadata-only lifecycle events.
            on_output: receives stdout and stderr chunks and display bundles as they come,
                within the run's ceilings; the result is the same with or without it.
            cancel: set it to stop the run; the result then has outcome ``cancelled``.
            tenant: whose run this is (an API key's owner, an MCP session): waiting runs of
                several tenants share the workers fairly.
            stdin: the program's standard input, then EOF; None: EOF at once, and ``input()``
                fails saying there is no stdin.
            files: relative path to content, written into the working folder first.
            queue_timeout: seconds the run may wait for a worker; the run's own
                ``limits.timeout`` then starts once it has one. A run still waiting then has
                outcome ``busy``. None: queue, start and run share ``limits.timeout``.
            network: what the run may reach, within the server's ceiling (``egress``);
                nothing by default. A link that cannot be made for its worker makes the
                run ``worker_error``, saying why.
            language: ``python`` or another language this engine serves
                (``Engine.languages``): compiled once in a sandbox, then run with
                ``argv[1:]`` as its arguments; the result's ``compile`` says how the compile
                went (a failed one is ``python_error`` and the program never ran).
            compile_timeout: seconds the compile may take; ``limits.timeout`` when None,
                at most the engine's ``limits.timeout``.
            template: a template's name: the run's sandbox has its packages, files,
                environment and working folder ("" the default runtime).

        Raises:
            EngineClosed: the engine is not running (or is draining).
            TemplateNotFound: no ``template`` of that name that ``tenant`` may use.
            NetworkUnavailable: ``network`` allows something this server cannot give.
            NetworkPolicyError: ``network`` allows more than the server's ceiling.
            SourceError: a source could not be ingested (``corral.Engine`` only).
            OSError: a source path could not be read.
            TypeError: ``sources`` on an engine that cannot ingest them, or ``stdin``
                that is not bytes.
            LanguageUnavailable: ``language`` is unknown or not served here.
        """
        self._runs.check_open()
        policy = self._networks.check(network)  # refusals before a compile is spent
        program = None
        if language not in PYTHON_NAMES:
            if template:
                self.template(template, tenant)
            compiled = await self._compiled(
                language, code, files, limits or self.limits, compile_timeout, queue_timeout,
                tenant,
            )  # fmt: skip
            if isinstance(compiled, ExecutionResult):
                return compiled
            program, code, files = compiled
        if sources:
            inputs = (*inputs, *await anyio.to_thread.run_sync(self._ingest, tuple(sources)))
        options = RunOptions(
            limits=limits or self.limits,
            inputs=inputs,
            argv=argv,
            on_event=on_event,
            on_output=on_output,
            cancel=cancel,
            tenant=tenant,
            feed=Feed(stdin, files or {}),
            queue_timeout=queue_timeout,
            network=policy,
        )
        if not template:
            return with_compile(await self._runs.run(self._fresh, code, options), program)
        zygote = await self.templates.use(template, tenant)
        with self.templates.running(zygote):
            return with_compile(await self._runs.run(zygote.fresh, code, options), program)

    async def _compiled(
        self,
        language: str,
        source: str,
        files: Mapping[str, bytes] | None,
        limits: Limits,
        compile_timeout: float | None,
        queue_timeout: float | None,
        tenant: str,
    ) -> tuple[Program, str, dict[str, bytes]] | ExecutionResult:
        """``source`` compiled (in a fresh worker, once per program): the program, the code
        that runs it and the files that run needs besides ``files``; or, when the compile
        failed, every run's result."""
        program = await self._programs.prepare(
            language,
            source,
            # At most the engine's own timeout: a compile holds a worker as any run does.
            compile_timeout=min(compile_timeout or limits.timeout, self.limits.timeout),
            base=limits,
            compile_run=fresh_compile(self._runs, self._fresh, tenant, queue_timeout),
            given=files or {},
        )
        if isinstance(program, ExecutionResult):
            return program
        return program, program.code, {**(files or {}), **program.files}

    async def run_cases(
        self,
        code: str,
        cases: Sequence[Case],
        *,
        limits: Limits | None = None,
        files: Mapping[str, bytes] | None = None,
        queue_timeout: float | None = None,
        tenant: str = "",
        language: str = "python",
        compile_timeout: float | None = None,
    ) -> list[ExecutionResult]:
        """Run ``code`` once per case, each case a fresh isolated run; results in case order.

        Cheaper than a ``run`` per case: the cases fork from case servers that compiled the
        code once and imported its standard-library imports (``corral.engine._cases``), on
        at most ``capacity`` of them, each case taking a slot of the fair scheduler.

        Args:
            code: the program every case runs.
            cases: each case's stdin and, when not ``limits``, its own limits.
            limits: the cases' bounds; the engine's default when None.
            files: relative path to content, written into each case's working folder.
            queue_timeout: seconds each case may wait for a slot (as for ``run``).
            tenant: whose cases these are, for the fair scheduler.
            language: as for ``run``: the program is compiled once, then each case execs
                it; a failed compile is every case's result.
            compile_timeout: as for ``run``.

        Raises:
            EngineClosed: the engine is not running (or is draining).
            LanguageUnavailable: ``language`` is unknown or not served here.
        """
        self._runs.check_open()
        program = None
        if language not in PYTHON_NAMES:
            compiled = await self._compiled(
                language, code, files, limits or self.limits, compile_timeout, queue_timeout,
                tenant,
            )  # fmt: skip
            if isinstance(compiled, ExecutionResult):
                return [compiled] * len(cases)
            program, code, files = compiled
        results = await run_cases(
            self._workers,
            self._runs,
            code,
            cases,
            limits=limits or self.limits,
            files=files or {},
            queue_timeout=queue_timeout,
            tenant=tenant,
            launch=None if program is None else program.launch,
        )
        return [with_compile(result, program) for result in results]

    async def run_case(
        self,
        code: str,
        case: Case,
        *,
        limits: Limits | None = None,
        files: Mapping[str, bytes] | None = None,
        queue_timeout: float | None = None,
        tenant: str = "",
        language: str = "python",
        compile_timeout: float | None = None,
    ) -> ExecutionResult:
        """Run ``code`` once on ``case``: one test case of a program the caller runs many
        times, each call on its own (``/run_code``, one request per test case).

        The result is what ``run`` gives. The first call of a program runs in a fresh
        worker; calls that repeat it (the same code from the same tenant within
        ``REPEAT_WINDOW`` seconds) fork from case servers kept for it, as the cases of
        ``run_cases`` do (``corral.engine._repeats``).

        Args:
            code: the program.
            case: its standard input and, when not ``limits``, its own limits.
            limits: the run's bounds; the engine's default when None.
            files: relative path to content, written into the working folder first.
            queue_timeout: seconds the call may wait for a worker (as for ``run``).
            tenant: whose call this is: case servers are never shared between tenants.
            language: as for ``run``: the compile is cached, so calls that repeat a
                program compile it once.
            compile_timeout: as for ``run``.

        Raises:
            EngineClosed: the engine is not running (or is draining).
            LanguageUnavailable: ``language`` is unknown or not served here.
        """
        self._runs.check_open()
        program = None
        if language not in PYTHON_NAMES:
            compiled = await self._compiled(
                language, code, files, case.limits or limits or self.limits, compile_timeout,
                queue_timeout, tenant,
            )  # fmt: skip
            if isinstance(compiled, ExecutionResult):
                return compiled
            program, code, files = compiled
        result = await self._repeats.run(
            code,
            case,
            limits=limits or self.limits,
            files=files or {},
            queue_timeout=queue_timeout,
            tenant=tenant,
            launch=None if program is None else program.launch,
        )
        return with_compile(result, program)

    def stream(
        self,
        code: str,
        *,
        inputs: Sequence[Input] = (),
        sources: Sequence[SourceItem] = (),
        limits: Limits | None = None,
        argv: Sequence[str] | None = None,
        on_event: RunEventSink | None = None,
        cancel: anyio.Event | None = None,
        tenant: str = "",
    ) -> AsyncGenerator[OutputEvent | ExecutionResult, None]:
        """Run ``code`` as ``run`` does; yield its OutputEvents, then its ExecutionResult.

        Leaving the loop early cancels the run.

        Raises:
            EngineClosed: the engine is not running, or stopped during the run.
        """

        def start(listener: OutputListener, stop: anyio.Event) -> Awaitable[ExecutionResult]:
            return self.run(
                code, inputs=inputs, sources=sources, limits=limits, argv=argv,
                on_event=on_event, cancel=stop, on_output=listener, tenant=tenant,
            )  # fmt: skip

        return iterate(self._background(), start, cancel)

    def spawn(self, work: Callable[[], Awaitable[object]]) -> None:
        """Run ``work`` in the engine's task group (a template build a request started);
        its failures are its own to report: they are logged, never the engine's.

        Raises:
            EngineClosed: the engine is not running.
        """
        self._background().start_soon(supervise_once, work)

    def _background(self) -> anyio.abc.TaskGroup:
        """The engine's task group, for work that outlives one call (streamed runs).

        Raises:
            EngineClosed: the engine is not running.
        """
        return self._runs.background()

    def _ingest(self, sources: Sequence[SourceItem]) -> list[Input]:
        """Inputs for ``run(sources=...)``; ``corral.Engine`` overrides this with ingestion."""
        raise TypeError(
            "corral.engine.Engine cannot ingest sources (corral.sources sits above it): "
            "use corral.Engine, or pass inputs= built with corral.sources"
        )

    # sessions ----------------------------------------------------------------------------

    async def open_session(
        self,
        *,
        session_id: str | None = None,
        limits: Limits | None = None,
        tenant: str = "",
        network: SandboxNetwork = NO_NETWORK,
        template: str = "",
        snapshot: str | None = None,
    ) -> Session:
        """Open a stateful session backed by a persistent isolated worker.

        Args:
            session_id: its id (a random one when None).
            limits: its runs' bounds; ``memory_bytes`` also bounds the whole session (every
                process and the files it keeps in memory together) where cgroups are in force.
            tenant: whose session: a tenant's sessions share the CPU fairly with others'.
            network: what the session may reach, within the server's ceiling (``egress``);
                nothing by default; ``Session.update_network`` changes it.
            template: a template's name: the session's sandbox comes from its zygote, its
                files copied into the session's folder ("" the default runtime).
            snapshot: start from this snapshot of ``tenant``'s (``Session.snapshot``): its
                files and, if full, its globals; each session opened so is its own copy.

        Raises:
            EngineClosed: the engine is not running.
            TemplateNotFound: no ``template`` of that name that ``tenant`` may use.
            SessionExists: ``session_id`` is taken.
            NetworkUnavailable: it asks for a network this server cannot give.
            SnapshotNotFound: no such snapshot of ``tenant``'s.
            SnapshotError: the snapshot is corrupt.
        """
        self._runs.check_open()
        assert self._sessions is not None
        if not template:
            return await self._sessions.open(
                session_id=session_id, limits=limits or self.limits, tenant=tenant,
                network=network, snapshot=snapshot,
            )  # fmt: skip
        zygote = await self.templates.use(template, tenant)
        with self.templates.running(zygote):
            session = await self._sessions.open(
                session_id=session_id, limits=limits or self.limits, tenant=tenant,
                network=network, snapshot=snapshot,
                spawn_holder=self.templates.holder_spawner(zygote, self.session_disk_bytes),
            )  # fmt: skip
            zygote.sessions.append(session)
        return session

    session = open_session

    @property
    def paused(self) -> SessionManager:
        """Snapshots, paused sessions and their shutdown (``SessionManager``'s pause part)."""
        assert self._sessions is not None
        return self._sessions

    def template(self, name: str, tenant: str = "") -> Template:
        """The template ``name``, if ``tenant`` may use it.

        Raises:
            TemplateNotFound: there is none, or it is another key's.
        """
        return self.templates.store.get(name, tenant)

    def get_session(self, session_id: str) -> Session:
        """Raises: SessionNotFound."""
        self._runs.check_open(admit=False)
        assert self._sessions is not None
        return self._sessions.get(session_id)

    def sessions(self) -> list[Session]:
        return [] if self._sessions is None else self._sessions.all()

    async def _spawn_holder(self, tenant: str, limits: Limits) -> HolderLike:
        zygote = self._full.zygote
        if zygote is None:
            raise ZygoteUnavailable("no zygote")
        holder = await zygote.spawn_holder(
            self.session_disk_bytes,
            memory_bytes=limits.memory_bytes,
            group=key_group(tenant) if tenant else None,
        )
        if self._data_dir is not None:
            # Before any code runs: the folder, and what earlier sessions left, become this
            # session's own uid's (each session has one of its own).
            try:
                await anyio.to_thread.run_sync(
                    adopt_data_dir, self._data_dir, holder.outer_id, self._uids
                )
            except BaseException:
                holder.kill()
                holder.close()
                raise
        return holder

    def statistics(self) -> EngineStatistics:
        pools = [z.pool.statistics() for z in self._supplies() if z.pool is not None]
        egress = self._networks.egress
        sched = self._scheduler.statistics()
        cpu_ns = Counter(self._runs.cpu_ns_by_tenant)
        background: Counter[str] = Counter()
        for session in self.sessions():
            cpu_ns[session.tenant] += session.cpu_ns()
            if count := session.background_processes():
                background[session.tenant] += count
        return EngineStatistics(
            capacity=sched.capacity,
            running=sched.running,
            queued=sched.queued,
            queue_size=sched.queue_size,
            pool_size=sum(p.size for p in pools),
            pool_ready=sum(p.ready for p in pools),
            sessions=len(self.sessions()),
            zygote_restarts=sum(z.restarts for z in self._supplies()),
            runs_by_outcome=dict(self._runs.outcomes),
            scheduler=sched,
            unavailable=self.unavailable,
            case_servers=self._repeats.servers,
            cgroups=self.cgroups_status,
            cpu_seconds_by_tenant={t: ns / 1e9 for t, ns in cpu_ns.items() if ns},
            background_by_tenant=dict(background),
            egress=None if egress is None else egress.statistics(),
        )

"""Code contexts: separate interpreter states in one sandbox, running side by side.

E2B's code interpreter keeps one kernel per context. In corral the default context is the
session's own interpreter and every other context an interpreter beside it
(``Session.run(interpreter=...)``), so runs in different contexts go side by side and share
the sandbox's files, processes and walls. Before a context's first run, and around a run with
``env_vars`` of its own, a short preparation cell applies the sandbox's ``envVars`` (once per
interpreter), the context's working folder and the run's ``env_vars`` (for that run only);
restarting the default context empties its globals there. The helper lives in a module of the
interpreter, not in any context's globals. Contexts are no security boundary, only separate
states, as in E2B. A deadline or a closed connection interrupts the run and keeps the context;
when a context's interpreter restarts (code that ignored the interrupt, a crash) that context
starts afresh, and a restart of the default one ends every context.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

import anyio

__all__ = ["DEFAULT_CONTEXT", "HOME", "PYTHON", "SANDBOX_USER", "Context", "Contexts"]

HOME = "/home/user"
SANDBOX_USER = "user"
"""The one user of an E2B sandbox (uid 1000 inside): envd's default, never root."""
DEFAULT_CONTEXT = "default"
PYTHON = "python"
_E2B_ENV = {
    "HOME": HOME,
    "USER": SANDBOX_USER,
    # plotly's fig.show() as E2B's kernel gives it: the figure's JSON and its HTML.
    "PLOTLY_RENDERER": "plotly_mimetype+notebook_connected",
}
"""What every E2B sandbox's interpreter has in its environment, as on E2B."""
_MAX_CONTEXTS = 16

_HELPER = """
import builtins, os, sys
spaces = {}
cwds = {}
current = "default"
temporary = {}
def enter(target, cwd, env, run_env, reset):
    global current
    if env is not None:  # a fresh interpreter: E2B's charts beside each figure's PNG
        from corral.sandbox.inside import _charts, _runner
        _charts.install(_runner.DISPLAY)
    main = sys.modules["__main__"].__dict__
    for key, old in temporary.items():
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old
    temporary.clear()
    if env is not None:
        os.environ.update(env)
    if cwd is not None:
        cwds[target] = cwd
    for name in reset:
        spaces.pop(name, None)
        if name == current:
            main.clear()
            main.update({"__name__": "__main__", "__builtins__": builtins})
    if target != current:
        spaces[current] = dict(main)
        main.clear()
        main.update(spaces.pop(target, None) or {"__name__": "__main__", "__builtins__": builtins})
        current = target
    os.chdir(cwds.get(target, "/home/user"))
    for key, value in run_env.items():
        temporary[key] = os.environ.get(key)
        os.environ[key] = value
"""


@dataclass(slots=True)
class _Prepared:
    """What an interpreter has been told: ``fresh`` (nothing yet), the context it last ran,
    whether the last run's ``env_vars`` must be undone, which contexts to empty."""

    fresh: bool = True
    current: str = DEFAULT_CONTEXT
    temporary: bool = False
    reset: set[str] = field(default_factory=set)


@dataclass(slots=True, eq=False)
class Context:
    id: str
    cwd: str
    language: str = PYTHON
    """``python``, or ``bash`` (``corral.e2b._bash``)."""
    executions: int = 0
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    """Held across a run and the preparation before it."""
    prepared: _Prepared = field(default_factory=_Prepared)
    """Its interpreter's (the default context's: the session's own)."""

    @property
    def interpreter(self) -> str:
        """The session's interpreter it runs in ("" the session's own)."""
        return "" if self.id == DEFAULT_CONTEXT else self.id

    def as_json(self) -> dict[str, str]:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}


class Contexts:
    """A sandbox's contexts, and what each one's interpreter must be told before its next run."""

    def __init__(self, env_vars: Mapping[str, str], cwd: str = HOME) -> None:
        """``cwd``: the default context's folder (a template's working folder)."""
        self._env_vars = dict(env_vars)
        self._by_id = {DEFAULT_CONTEXT: Context(DEFAULT_CONTEXT, cwd)}
        self._defaults = {PYTHON: DEFAULT_CONTEXT}
        """The context a run naming only its language runs in, per language (E2B makes one
        on first use, in ``/home/user``, and lists it)."""

    def get(self, context_id: str) -> Context | None:
        return self._by_id.get(context_id)

    def all(self) -> list[Context]:
        return list(self._by_id.values())

    @property
    def sandbox_env(self) -> dict[str, str]:
        """What every interpreter of the sandbox has in its environment."""
        return {**_E2B_ENV, **self._env_vars}

    def new(self, cwd: str | None, language: str = PYTHON) -> Context | None:
        """A context not yet listed (``add`` lists it); None when the sandbox holds its
        maximum of contexts."""
        if len(self._by_id) >= _MAX_CONTEXTS:
            return None
        return Context(secrets.token_hex(8), cwd or HOME, language)

    def for_language(self, language: str) -> Context | None:
        """The context a run that names only ``language`` runs in, made and listed on first
        use; None when the sandbox holds its maximum of contexts."""
        known = self._by_id.get(self._defaults.get(language, ""))
        if known is not None:
            return known
        context = self.new(None, language)
        if context is None or not self.add(context):
            return None
        self._defaults[language] = context.id
        return context

    def add(self, context: Context) -> bool:
        """List ``context``; False when the sandbox reached its maximum meanwhile."""
        if len(self._by_id) >= _MAX_CONTEXTS:
            return False
        self._by_id[context.id] = context
        return True

    def restart(self, context: Context) -> None:
        """Its state starts afresh: the default one's globals are emptied before its next
        run; another's interpreter the caller has ended already."""
        context.executions = 0
        if context.id == DEFAULT_CONTEXT:
            context.prepared.reset.add(context.id)
        else:
            context.prepared = _Prepared()

    def delete(self, context: Context) -> None:
        self._by_id.pop(context.id, None)

    def interpreter_restarted(self, context: Context | None = None) -> None:
        """``context``'s interpreter is new (None, or the default: every interpreter is)."""
        restarted = (
            self._by_id.values() if context is None or context.id == DEFAULT_CONTEXT else [context]
        )
        for each in restarted:
            each.prepared = _Prepared()
            each.executions = 0

    def preparation(self, context: Context, run_env: Mapping[str, str]) -> str | None:
        """The cell to run before the code, or None when the interpreter is ready as it is."""
        state = context.prepared
        if not (
            state.fresh or context.id != state.current or run_env or state.temporary or state.reset
        ):
            return None
        # Installed when missing, whatever the bookkeeping says: a restarted interpreter has
        # no helper, and installing it again costs one dictionary lookup.
        install = (
            "import sys as _s, types as _t\n"
            "if '__corral_e2b__' not in _s.modules:\n"
            "    _m = _t.ModuleType('__corral_e2b__')\n"
            f"    exec({_HELPER!r}, _m.__dict__)\n"
            "    _s.modules['__corral_e2b__'] = _m\n"
            "    del _m\n"
            "del _s, _t\n"
        )
        args = [
            context.id,
            context.cwd,
            # As on E2B: code and commands alike see /home/user as their home.
            self.sandbox_env if state.fresh else None,
            dict(run_env),
            sorted(state.reset),
        ]
        encoded = json.dumps(json.dumps(args))
        call = f"__import__('__corral_e2b__').enter(*__import__('json').loads({encoded}))\n"
        return install + call + "None\n"

    def prepared(self, context: Context, run_env: Mapping[str, str]) -> None:
        context.prepared = _Prepared(fresh=False, current=context.id, temporary=bool(run_env))

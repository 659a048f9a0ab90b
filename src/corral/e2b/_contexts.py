"""Code contexts: separate interpreter states in one sandbox's interpreter.

E2B's code interpreter keeps one kernel per context. corral's session has one interpreter, so
a context is a namespace of it: before a run in another context than the last one, a short
preparation cell swaps ``__main__``'s globals for that context's (and its working folder), and
the same cell applies the sandbox's ``envVars`` once per interpreter and a run's own
``env_vars`` for that run only. The helper lives in a module of the interpreter, not in any
context's globals. Contexts are no security boundary, only separate states, as in E2B. A
deadline or a closed connection interrupts the run and keeps every context; when the
interpreter restarts (code that ignored the interrupt, a crash), every context starts afresh.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT_CONTEXT", "HOME", "SANDBOX_USER", "Context", "Contexts"]

HOME = "/home/user"
SANDBOX_USER = "user"
"""The one user of an E2B sandbox (uid 1000 inside): envd's default, never root."""
DEFAULT_CONTEXT = "default"
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
class Context:
    id: str
    cwd: str
    executions: int = 0

    def as_json(self) -> dict[str, str]:
        return {"id": self.id, "language": "python", "cwd": self.cwd}


class Contexts:
    """A sandbox's contexts, and what its interpreter must be told before the next run."""

    def __init__(self, env_vars: Mapping[str, str], cwd: str = HOME) -> None:
        """``cwd``: the default context's folder (a template's working folder)."""
        self._env_vars = dict(env_vars)
        self._by_id = {DEFAULT_CONTEXT: Context(DEFAULT_CONTEXT, cwd)}
        self._fresh = True  # the interpreter has not been prepared yet
        self._current = DEFAULT_CONTEXT
        self._temporary = False  # the last run set env_vars that must be undone
        self._reset: set[str] = set()

    def get(self, context_id: str) -> Context | None:
        return self._by_id.get(context_id)

    def all(self) -> list[Context]:
        return list(self._by_id.values())

    def create(self, cwd: str | None) -> Context | None:
        """None when the sandbox holds its maximum of contexts."""
        if len(self._by_id) >= _MAX_CONTEXTS:
            return None
        context = Context(secrets.token_hex(8), cwd or HOME)
        self._by_id[context.id] = context
        return context

    def restart(self, context: Context) -> None:
        context.executions = 0
        self._reset.add(context.id)

    def delete(self, context: Context) -> None:
        self._by_id.pop(context.id, None)
        self._reset.add(context.id)

    def interpreter_restarted(self) -> None:
        """Every namespace is gone; the next run prepares a new interpreter."""
        self._fresh = True
        self._current = DEFAULT_CONTEXT
        self._temporary = False
        self._reset.clear()
        for context in self._by_id.values():
            context.executions = 0

    def preparation(self, context: Context, run_env: Mapping[str, str]) -> str | None:
        """The cell to run before the code, or None when the interpreter is ready as it is."""
        if not (
            self._fresh or context.id != self._current or run_env or self._temporary or self._reset
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
            {**_E2B_ENV, **self._env_vars} if self._fresh else None,
            dict(run_env),
            sorted(self._reset),
        ]
        encoded = json.dumps(json.dumps(args))
        call = f"__import__('__corral_e2b__').enter(*__import__('json').loads({encoded}))\n"
        return install + call + "None\n"

    def prepared(self, context: Context, run_env: Mapping[str, str]) -> None:
        self._fresh = False
        self._current = context.id
        self._temporary = bool(run_env)
        self._reset.clear()

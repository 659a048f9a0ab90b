"""Attacks on a case server from one of its cases, through the engine's real case servers.

Every program here starts with GUARD, which proves from inside that it is a case of a case
server (its parent is pid 1 of a pid namespace in which only that server and the case itself
exist, hostname "corral", a user namespace mapping one uid) and raises before it touches
pid 1 or anything else otherwise. Each program prints what it observes first, as one JSON
line, then reads its stdin: ``attack`` makes it run its attack and print what that did.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from corral.engine import Case, Engine

GUARD = """\
import json, os, socket
_pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
if (os.getppid() != 1 or _pids != sorted({1, os.getpid()})
        or socket.gethostname() != 'corral'
        or len(open('/proc/self/uid_map').read().splitlines()) != 1):
    raise RuntimeError(f'refusing to touch pid 1 outside a case server: {_pids}')
"""

SERVER = (
    "(os.readlink('/proc/self/ns/pid'), open('/proc/self/uid_map').read().split()[1],"
    " open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19])"
)
"""An expression naming the case's server: its pid namespace and (the kernel reuses a freed
namespace's number) its host uid and start time."""


@dataclass(frozen=True, slots=True)
class Seen:
    server: Any
    observed: Any
    attack: Any
    """What the attack printed (None for a case that did not attack)."""


def program(observe: str, attack: str, prelude: str = "") -> str:
    """The guarded program: ``observe`` is an expression, ``attack`` statements that leave
    their report in ``did``, ``prelude`` what both may use."""
    return (
        GUARD
        + prelude
        + f"print(json.dumps([{SERVER}, {observe}]), flush=True)\n"
        + "if input() == 'attack':\n"
        + "    did = None\n"
        + "".join(f"    {line}\n" for line in attack.splitlines())
        + "    print(json.dumps(did))\n"
    )


async def attack_then_observe(
    engine: Engine, observe: str, attack: str, prelude: str = ""
) -> list[Seen]:
    """Case 0 observes, then attacks; cases 1 and 2 observe after it, on one lane."""
    stdins = [b"attack\n", b"keep\n", b"keep\n"]
    code = program(observe, attack, prelude)
    results = await engine.run_cases(code, [Case(stdin=s) for s in stdins])
    seen = []
    for result in results:
        assert result.outcome == "ok", (result.outcome, result.message, result.stderr)
        lines = result.stdout.splitlines()
        server, observed = json.loads(lines[0])
        seen.append(Seen(server, observed, json.loads(lines[1]) if len(lines) > 1 else None))
    return seen

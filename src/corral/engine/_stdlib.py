"""Which code needs no preloaded package: imports of the standard library only.

Apart from the supplies so that ``corral run`` can choose its zygote before it imports the
engine.
"""

from __future__ import annotations

import ast
import functools
import sys

__all__ = ["stdlib_only"]

_STDLIB = frozenset(sys.stdlib_module_names)


@functools.lru_cache(maxsize=256)  # batches and RL rewards run one program for many cases
def stdlib_only(code: str) -> bool:
    """True when every import the code states is of the standard library.

    Dynamic imports still work from a lean worker, only without the preloaded head start.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return True  # it fails the same way anywhere: fail fast
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                return False
            names = [node.module or ""]
        else:
            continue
        if any(name.partition(".")[0] not in _STDLIB for name in names):
            return False
    return True

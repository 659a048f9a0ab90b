"""The ``corral`` command line: a thin adapter over the public API.

Above: people and scripts. Below: corral.engine, corral.sources, corral.tools, corral.http,
corral.mcp and corral.mistral, through their exported names only. Exit codes of ``corral run``:
0 on ``ok``, 1 on ``python_error``, 2 on invalid input, 3 on any other outcome.
"""

from corral._public import publish as _publish
from corral.cli._main import main

__all__ = ["main"]

_publish(globals())

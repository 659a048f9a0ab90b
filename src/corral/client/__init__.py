"""A Python client for corral's own HTTP routes (``/v1/execute``, sessions, files).

Above: applications and agents that reach ``corral serve`` over the network. Below: httpx,
plus ``corral.engine``'s result types (a run returns the same ``ExecutionResult`` as the
engine) and ``corral.errors``. Deliberately not server-aware: it never imports ``corral.http``.
"""

from corral._public import publish as _publish
from corral.client._async import AsyncClient, AsyncSession
from corral.client._sync import Client, Session
from corral.client._wire import RemoteFile

__all__ = ["AsyncClient", "AsyncSession", "Client", "RemoteFile", "Session"]

_publish(globals())

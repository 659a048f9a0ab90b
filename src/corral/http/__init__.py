"""The HTTP front end: DIAL-compatible gateway and container modes (FastAPI + uvicorn).

Above: users, DIAL Core and DIAL Quick Apps, over HTTP. Below: the engine's public API only
(``corral.engine``: runs, sessions, statistics), plus :mod:`corral._fs` for container mode's
session folder and the files store; never ``corral.sandbox``. Not engine-aware beyond that:
it renders ExecutionResults as DIAL's five fields or corral's full shape, and maps corral
errors to statuses in one table (``_errors.STATUS_BY_ERROR``).
"""

from corral._public import publish as _publish
from corral.http._app import create_app
from corral.http._server import engine_options, serve, serve_async

__all__ = ["create_app", "engine_options", "serve", "serve_async"]

_publish(globals())

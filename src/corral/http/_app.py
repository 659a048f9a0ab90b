"""``create_app``: the one place where the HTTP pieces are wired together."""

from __future__ import annotations

import logging

from fastapi import FastAPI

import corral
from corral import _fs
from corral._config import Config
from corral.e2b import E2BGateway, E2BService
from corral.errors import ConfigError
from corral.http import _container, _files_api, _gateway, _own, _pause, _playground, _sandboxfusion
from corral.http._auth import Keyring
from corral.http._body import BodyLimit
from corral.http._container_session import ContainerSession
from corral.http._docs import install_docs
from corral.http._engine_api import EngineAPI
from corral.http._errors import install_error_handlers
from corral.http._metrics import Metrics
from corral.http._sessions import Registry
from corral.http._state import Gateway, State
from corral.http._store import FileStore

__all__ = ["create_app"]

_UPLOAD_PATHS = ("/upload_file", "/v1/ops/code_interpreter/upload_file")


def _is_upload(method: str, path: str) -> bool:
    return path in _UPLOAD_PATHS or (method == "PUT" and path.startswith("/v1/files/"))


def create_app(engine: EngineAPI, config: Config) -> FastAPI:
    """The ASGI app for ``config.mode``, serving a started ``engine``.

    The caller owns the engine's lifetime (``serve`` does, tests do). Gateway mode opens the
    files store under ``config.data_dir/files``.

    Raises:
        ConfigError: gateway mode without any API key.
    """
    gateway = config.mode == "gateway"
    app = FastAPI(title="corral", version=corral.__version__, docs_url=None, redoc_url=None)
    state = State(engine=engine, config=config, metrics=Metrics(engine.statistics))
    state.network = config.network_ceiling()
    if gateway:
        if not config.api_keys:
            raise ConfigError("gateway mode needs an API key: set CORRAL_API_KEYS=key:user")
        keyring = Keyring(config.api_keys, config.create_code_app_roles)
        _fs.make_private_dir(config.data_dir)
        store = FileStore(config.data_dir / "files", bucket_quota=config.bucket_quota_bytes)
        registry = Registry(engine, config.max_sessions_per_key)
        registry.adopt()  # DIAL sessions the last server paused at its shutdown
        state.gateway = Gateway(keyring=keyring, store=store, registry=registry)
        routers = (_gateway.router, _files_api.router, _own.router, _playground.router)
        for router in (*routers, _sandboxfusion.router, _pause.router):
            app.include_router(router)
        if config.open_run_code:
            logging.getLogger("corral.http").warning(_sandboxfusion.OPEN_WARNING)
    else:
        state.container = ContainerSession(engine)
        app.include_router(_container.router)
    app.include_router(_own.metrics_router)
    app.state.corral = state
    install_docs(app, gateway=gateway)
    install_error_handlers(app, plain_text=gateway)
    app.add_middleware(
        BodyLimit,
        max_request_bytes=config.max_request_bytes,
        upload_max_size=config.upload_max_size,
        is_upload=_is_upload,
        plain_text=gateway,
    )
    if gateway:
        # Outermost: E2B's requests never reach corral's routes, middleware or error pages.
        app.add_middleware(E2BGateway, service=E2BService.build(engine, config))
    return app

"""The one configuration object, from ``corral.toml``, ``CORRAL_*`` variables and flags.

Precedence: flag > environment > file > default. Every field maps onto a flag (its name), a
``corral.toml`` key and an environment variable; the container-mode settings keep the names
DIAL's interpreter image uses (``SESSION_ID``, ``UPLOAD_MAX_SIZE``, ``MOUNT_FOLDER``, ...), so
corral can replace it without new deployment variables. This is the only module that reads the
environment. Tables other than ``[server]``, ``[engine]`` and ``[container]`` (``[mistral]``,
...) are left to their packages through :attr:`Config.raw_toml`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from corral._limits import DEFAULT_LIMITS, Limits
from corral._uids import UidRange
from corral.errors import ConfigError

__all__ = ["ApiKey", "Config", "Mode"]

Mode = Literal["gateway", "container"]
Cast = Callable[[Any], Any]
_MIB = 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiKey:
    """A credential accepted by the gateway; sessions and the bucket belong to it."""

    key: str = field(repr=False)
    """The secret sent as ``Api-Key`` or ``Authorization: Bearer``."""
    user: str
    """Who holds the key, for logs."""
    roles: tuple[str, ...] = ()
    """Roles matched against ``access.create_code_app_roles``."""
    per_request: bool = False
    """An application's per-request key: passes the role check whatever its roles (DIAL)."""


def _default_data_dir(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_DATA_HOME") or str(Path(environ.get("HOME", ".")) / ".local/share")
    return Path(base) / "corral"


@dataclass(frozen=True, kw_only=True)
class Config:
    """Everything ``corral serve`` needs, resolved once; below the front ends only
    :class:`~corral.Limits` and constructor arguments travel."""

    host: str | None = None
    """Address to bind; default ``127.0.0.1`` for gateway, ``0.0.0.0`` for container mode."""
    port: int | None = None
    """Port to bind; default 8000 for gateway, 8080 (DIAL's image) for container mode."""
    mode: Mode = "gateway"
    """``gateway``: DIAL Core's operations, many sessions; ``container``: one DIAL container."""
    data_dir: Path = field(default_factory=lambda: _default_data_dir(os.environ))
    """Files store (SQLite metadata and bytes) and engine session folders."""
    api_keys: tuple[ApiKey, ...] = ()
    """Gateway credentials; the gateway refuses to start without one."""
    create_code_app_roles: tuple[str, ...] | None = None
    """DIAL's ``access.createCodeAppRoles``: None allows everyone, ``()`` no one."""
    max_sessions_per_key: int = 32
    """Open sessions one key may hold; one more answers 429."""
    max_request_bytes: int = 16 * _MIB
    """Largest request body other than file uploads."""
    upload_max_size: int = 512 * _MIB
    """Largest uploaded or transferred file (DIAL's ``UPLOAD_MAX_SIZE``)."""
    capacity: int | None = None
    """Concurrent workers; None means one per CPU."""
    queue_size: int = 256
    """Runs waiting for a worker; beyond that a run is refused as busy."""
    timeout: float = DEFAULT_LIMITS.timeout
    """Seconds for one execution (queue + start + run): the one default, ``Limits.timeout``
    (the seed's 30 s); a request may ask for less, never more."""
    session_idle_timeout: float = 600.0
    """Seconds after its last use when a session expires (DIAL's ``sessionTtl``)."""
    session_disk_bytes: int = 256 * _MIB
    """Disk quota of one session folder."""
    list_max_entries: int = 10_000
    """Files a session listing returns at most; a cut listing says so (``[engine]``)."""
    max_queued_per_key: int = 64
    """Runs one API key may have waiting for a worker; more are answered busy."""
    shutdown_grace: float = 5.0
    """Seconds runs in flight may take to finish after SIGTERM before they are cancelled."""
    uid_range: tuple[int, int] | None = None
    """Host uids for the sandbox as ``(first, count)``: one per live worker or session, the
    first of each half for a zygote. None: corral's default block (see ``corral doctor``)."""
    session_id: str | None = None
    """Container mode: the ``x-dial-session-id`` every request must carry (``SESSION_ID``)."""
    mount_folder: Path = Path("/mnt/data")
    """Container mode: the session root as requests name it (``MOUNT_FOLDER``); user code
    always sees its folder as ``/mnt/data``, DIAL's own default."""
    download_chunk_size: int = 8192
    """Container mode: bytes per chunk of a streamed download (``DOWNLOAD_CHUNK_SIZE``)."""
    log_level: str = "INFO"
    """Logging level name."""
    timeout_keep_alive: int = 60
    """Seconds an idle HTTP connection is kept open (``TIMEOUT_KEEP_ALIVE``)."""
    open_run_code: bool = False
    """Serve ``/run_code`` and ``/run_code_batch`` without an API key (a trainer's private
    network: verl and SandboxFusion's client send none)."""
    raw_toml: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The whole parsed ``corral.toml``, for tables other packages own (``[mistral]``)."""

    def __post_init__(self) -> None:
        if self.mode not in ("gateway", "container"):
            raise ConfigError(f"mode must be 'gateway' or 'container', not {self.mode!r}")
        if self.port is not None and not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0-65535, not {self.port}")
        for name in ("max_sessions_per_key", "max_request_bytes", "upload_max_size",
                     "queue_size", "session_disk_bytes", "download_chunk_size",
                     "timeout_keep_alive", "timeout", "session_idle_timeout",
                     "list_max_entries", "max_queued_per_key", "shutdown_grace"):  # fmt: skip
            value = getattr(self, name)
            if not value > 0 or not math.isfinite(value):
                raise ConfigError(f"{name} must be positive, not {value!r}")
        if self.capacity is not None and self.capacity < 1:
            raise ConfigError(f"capacity must be at least 1, not {self.capacity}")
        keys = [k.key for k in self.api_keys]
        if len(set(keys)) != len(keys):
            raise ConfigError("api_keys: the same key is listed twice")
        if self.uid_range is not None:
            try:
                UidRange(*self.uid_range).split()
            except ValueError as exc:
                raise ConfigError(f"uid_range: {exc}") from exc
        if self.session_id == "":
            object.__setattr__(self, "session_id", None)

    @property
    def bind_host(self) -> str:
        """The address to listen on, after the mode's default."""
        if self.host is not None:
            return self.host
        # DIAL's platform reaches the container from outside; a gateway starts private.
        return "0.0.0.0" if self.mode == "container" else "127.0.0.1"  # noqa: S104

    @property
    def bind_port(self) -> int:
        """The port to listen on, after the mode's default."""
        if self.port is not None:
            return self.port
        return 8080 if self.mode == "container" else 8000

    def engine_options(self) -> dict[str, Any]:
        """The ``Engine`` constructor arguments this config asks for."""
        return {
            "capacity": self.capacity,
            "queue_size": self.queue_size,
            "max_queued_per_tenant": self.max_queued_per_key,
            "limits": self.limits(),
            "session_idle_timeout": self.session_idle_timeout,
            "session_disk_bytes": self.session_disk_bytes,
            **({} if self.uid_range is None else {"uid_range": self.uid_range}),
        }

    def limits(self) -> Limits:
        """The default :class:`~corral.Limits` of every execution this server runs."""
        return Limits(timeout=self.timeout)

    def replace(self, **changes: Any) -> Config:
        """A copy with some fields changed (and validated)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def load(
        cls,
        *,
        flags: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Config:
        """Merge defaults, the file, the environment and flags (in rising precedence).

        Args:
            flags: field name to value, as given on the command line; None values are unset.
                ``config`` names the file (else ``CORRAL_CONFIG``; else no file).
            environ: the environment; default ``os.environ``.

        Raises:
            ConfigError: an unreadable file, an unknown key or ``CORRAL_*`` name, a bad value.
        """
        env = os.environ if environ is None else environ
        given = dict(flags or {})
        path = given.pop("config", None) or env.get("CORRAL_CONFIG") or None
        raw = _read_toml(Path(path)) if path else {}
        values: dict[str, Any] = {"data_dir": _default_data_dir(env)}
        values.update(_from_toml(raw))
        values.update(_from_env(env))
        for name, value in given.items():
            if name not in _FIELDS:
                raise ConfigError(f"unknown option {name!r}")
            if value is not None:
                values[name] = _cast(name, _FIELDS[name].cast, value)
        if "mount_folder" in values:
            values["mount_folder"] = Path(values["mount_folder"]).absolute()
        try:
            return cls(**values, raw_toml=MappingProxyType(raw))
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc)) from exc


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, not {value!r}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, str):
        return int(value.strip().replace("_", ""))
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, not {value!r}")
    return value


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"expected true or false, not {value!r}")
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, not {value!r}")
    return value


def _optional_int(value: Any) -> int | None:
    if isinstance(value, str) and value.strip().lower() in ("", "auto", "none"):
        return None
    return _int(value)


def _float(value: Any) -> float:
    if isinstance(value, str):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, not {value!r}")
    return float(value)


def _path(value: Any) -> Path:
    return Path(_text(value)).expanduser()


def _roles(value: Any) -> tuple[str, ...]:
    """A TOML list of role names, or ``role,role`` in the environment (``""`` is no one)."""
    if isinstance(value, str):
        return tuple(r.strip() for r in value.split(",") if r.strip())
    if not isinstance(value, list):
        raise TypeError(f"expected a list of role names, not {value!r}")
    return tuple(_text(r) for r in value)


def _uid_range(value: Any) -> tuple[int, int]:
    """``[first, count]`` in the file, ``first:count`` in the environment."""
    if isinstance(value, str):
        value = value.split(":")
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError("uid_range is [first, count] (CORRAL_UID_RANGE=first:count)")
    return _int(value[0]), _int(value[1])


def _api_keys(value: Any) -> tuple[ApiKey, ...]:
    """``[[server.api_keys]]`` tables, or ``key:user[:role|role],...`` in the environment."""
    if isinstance(value, str):
        keys = []
        for item in filter(None, (part.strip() for part in value.split(","))):
            key, _, rest = item.partition(":")
            user, _, roles = rest.partition(":")
            if not key or not user:
                raise ValueError("CORRAL_API_KEYS items are key:user[:role|role]")
            keys.append(ApiKey(key=key, user=user, roles=tuple(filter(None, roles.split("|")))))
        return tuple(keys)
    if not isinstance(value, list):
        raise TypeError("server.api_keys must be an array of tables")
    keys = []
    for entry in value:
        if not isinstance(entry, dict) or set(entry) - {"key", "user", "roles", "per_request"}:
            raise ValueError(f"an api_keys entry takes key, user, roles, per_request: {entry!r}")
        per_request = entry.get("per_request", False)
        if not isinstance(per_request, bool):
            raise TypeError("api_keys.per_request must be true or false")
        key, user = _text(entry.get("key")), _text(entry.get("user"))
        if not key or not user:
            raise ValueError("an api_keys entry needs a non-empty key and user")
        granted = _roles(entry.get("roles", []))
        keys.append(ApiKey(key=key, user=user, roles=granted, per_request=per_request))
    return tuple(keys)


@dataclass(frozen=True, slots=True)
class _Field:
    table: str
    """Where the key sits in ``corral.toml``."""
    env: tuple[str, ...]
    """Variable names, most specific first."""
    cast: Cast
    toml: tuple[type, ...]
    """Types accepted from the file (where strings are not parsed as numbers or lists)."""


_STR, _INT, _NUM, _LIST = (str,), (int,), (int, float), (list,)
_FIELDS: dict[str, _Field] = {
    "host": _Field("server", ("CORRAL_HOST",), _text, _STR),
    "port": _Field("server", ("CORRAL_PORT",), _int, _INT),
    "mode": _Field("server", ("CORRAL_MODE",), _text, _STR),
    "data_dir": _Field("server", ("CORRAL_DATA_DIR",), _path, _STR),
    "api_keys": _Field("server", ("CORRAL_API_KEYS",), _api_keys, _LIST),
    "create_code_app_roles": _Field(
        "server.access", ("CORRAL_CREATE_CODE_APP_ROLES",), _roles, _LIST
    ),
    "max_sessions_per_key": _Field("server", ("CORRAL_MAX_SESSIONS_PER_KEY",), _int, _INT),
    "max_request_bytes": _Field("server", ("CORRAL_MAX_REQUEST_BYTES",), _int, _INT),
    "upload_max_size": _Field("server", ("UPLOAD_MAX_SIZE",), _int, _INT),
    "log_level": _Field("server", ("CORRAL_LOG_LEVEL", "LOG_LEVEL"), _text, _STR),
    "timeout_keep_alive": _Field("server", ("TIMEOUT_KEEP_ALIVE",), _int, _INT),
    "open_run_code": _Field("server", ("CORRAL_OPEN_RUN_CODE",), _bool, (bool,)),
    "capacity": _Field("engine", ("CORRAL_CAPACITY",), _optional_int, _INT),
    "queue_size": _Field("engine", ("CORRAL_QUEUE_SIZE",), _int, _INT),
    "timeout": _Field("engine", ("CORRAL_TIMEOUT",), _float, _NUM),
    "session_idle_timeout": _Field("engine", ("CORRAL_SESSION_IDLE_TIMEOUT",), _float, _NUM),
    "session_disk_bytes": _Field("engine", ("CORRAL_SESSION_DISK_BYTES",), _int, _INT),
    "list_max_entries": _Field("engine", ("CORRAL_LIST_MAX_ENTRIES",), _int, _INT),
    "max_queued_per_key": _Field("engine", ("CORRAL_MAX_QUEUED_PER_KEY",), _int, _INT),
    "shutdown_grace": _Field("server", ("CORRAL_SHUTDOWN_GRACE",), _float, _NUM),
    "uid_range": _Field("engine", ("CORRAL_UID_RANGE",), _uid_range, _LIST),
    "session_id": _Field("container", ("SESSION_ID",), _text, _STR),
    "mount_folder": _Field("container", ("MOUNT_FOLDER",), _path, _STR),
    "download_chunk_size": _Field("container", ("DOWNLOAD_CHUNK_SIZE",), _int, _INT),
}
_ENV_NAMES = frozenset({"CORRAL_CONFIG"}.union(*(f.env for f in _FIELDS.values())))
_TABLES = ("server", "server.access", "engine", "container")


def _cast(name: str, cast: Cast, value: Any) -> Any:
    try:
        return cast(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: {exc}") from exc


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _from_toml(raw: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for table in _TABLES:
        section: Any = raw
        for part in table.split("."):
            section = section.get(part, {}) if isinstance(section, dict) else None
        if not isinstance(section, dict):
            raise ConfigError(f"[{table}] must be a table")
        known = {n for n, f in _FIELDS.items() if f.table == table}
        known |= {t.rpartition(".")[2] for t in _TABLES if t.startswith(table + ".")}
        for key, value in section.items():
            if key not in known:
                raise ConfigError(f"unknown key {key!r} in [{table}]")
            if key in _FIELDS:
                spec = _FIELDS[key]
                if (isinstance(value, bool) and bool not in spec.toml) or not isinstance(
                    value, spec.toml
                ):
                    raise ConfigError(f"{table}.{key}: wrong type {type(value).__name__}")
                values[key] = _cast(f"{table}.{key}", spec.cast, value)
    return values


def _from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    unknown = sorted(n for n in environ if n.startswith("CORRAL_") and n not in _ENV_NAMES)
    if unknown:
        raise ConfigError(f"unknown environment variable {unknown[0]} (CORRAL_* names are checked)")
    values: dict[str, Any] = {}
    for name, spec in _FIELDS.items():
        for var in spec.env:
            if var in environ:
                values[name] = _cast(var, spec.cast, environ[var])
                break
    return values

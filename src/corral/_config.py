"""The one configuration object, from ``corral.toml``, ``CORRAL_*`` variables and flags.

Precedence: flag > environment > file > default. Every key of ``corral.toml`` is declared once,
in ``_FIELDS``: where it sits, its type, its environment variables, its old camelCase names and
what it means; ``docs/configuration.md`` is generated from that table (``reference_markdown``)
and a test keeps the two equal. Keys of the front ends' own tables (``[code_interpreter]``,
``[mcp]``, ``[mistral]``) are checked here too and reach their packages, snake_case only,
through :attr:`Config.raw_toml` and :func:`table_values`. The container-mode settings keep the
names DIAL's interpreter image uses (``SESSION_ID``, ``UPLOAD_MAX_SIZE``, ``MOUNT_FOLDER``, ...),
so corral can replace it without new deployment variables. This is the only module that reads
the environment.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from corral._limits import DEFAULT_LIMITS, Limits
from corral._uids import UidRange
from corral.errors import ConfigError

if TYPE_CHECKING:
    from corral.engine import Languages, PackageSources
    from corral.network import NetworkCeiling

__all__ = ["ApiKey", "Config", "Mode", "reference_markdown", "table_values"]

Mode = Literal["gateway", "container"]
Cast = Callable[[Any], Any]
_MIB = 1024 * 1024
_MAX_CPU_QUOTA = 1024.0  # CPUs; a quota past any machine's is a typo
CONTAINER_TIMEOUT = 60.0
"""Seconds: DIAL's interpreter container hard-codes this execution timeout (docs/dial.md §3.4)."""


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
    network: bool = True
    """False: this key's sandboxes never have a network, whatever ``[network]`` allows."""


def _default_data_dir(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_DATA_HOME") or str(Path(environ.get("HOME", ".")) / ".local/share")
    return Path(base) / "corral"


@dataclass(frozen=True, kw_only=True)
class Config:
    """Everything ``corral serve`` needs, resolved once; below the front ends only
    :class:`~corral.Limits` and constructor arguments travel.

    Each field is a key of ``corral.toml`` of the same name; ``docs/configuration.md`` says
    what each one means (it is generated from the table of fields in this module).
    """

    host: str | None = None
    port: int | None = None
    mode: Mode = "gateway"
    data_dir: Path = field(default_factory=lambda: _default_data_dir(os.environ))
    api_keys: tuple[ApiKey, ...] = ()
    create_code_app_roles: tuple[str, ...] | None = None
    max_sessions_per_key: int = 32
    max_request_bytes: int = 16 * _MIB
    upload_max_size: int = 512 * _MIB
    bucket_quota_bytes: int = 4 * 1024 * _MIB
    capacity: int | None = None
    queue_size: int = 256
    timeout: float | None = None
    """Seconds per execution; None is the mode's default (:attr:`execution_timeout`)."""
    session_idle_timeout: float = 600.0
    session_idle_action: str = "close"
    paused_ttl: float = 7 * 24 * 3600.0
    max_paused_per_key: int = 64
    session_disk_bytes: int = 256 * _MIB
    list_max_entries: int = 10_000
    max_queued_per_key: int = 64
    shutdown_grace: float = 5.0
    uid_range: tuple[int, int] | None = None
    memory_bytes: int = DEFAULT_LIMITS.memory_bytes
    sandbox_cpu_quota: float = 0.0
    cgroup_parent: str = ""
    session_id: str | None = None
    mount_folder: Path = Path("/mnt/data")
    download_chunk_size: int = 8192
    log_level: str = "INFO"
    timeout_keep_alive: int = 60
    header_timeout: float = 10.0
    max_connections_per_client: int = 512
    trusted_proxies: tuple[str, ...] = ()
    open_run_code: bool = False
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    private_allow: tuple[str, ...] = ()
    hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    max_bytes: int = 1 << 30
    max_connections: int = 64
    upstream_ca: str = ""
    index_url: str = "https://pypi.org/simple"
    wheelhouse: str = ""
    template_zygotes: int = 4
    template_idle_timeout: float = 300.0
    max_run_seconds: float = 3600.0
    e2b_domain: str = ""
    port_max_connections: int = 64
    port_max_bytes: int = 1 << 30
    raw_toml: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The whole parsed ``corral.toml`` with every key snake_case, for the tables other
    packages read (``[code_interpreter]``, ``[mcp]``, ``[mistral]``)."""

    def __post_init__(self) -> None:
        if self.session_idle_action not in ("close", "pause"):
            raise ConfigError("session_idle_action must be 'close' or 'pause', not "
                              f"{self.session_idle_action!r}")  # fmt: skip
        if self.mode not in ("gateway", "container"):
            raise ConfigError(f"mode must be 'gateway' or 'container', not {self.mode!r}")
        if self.port is not None and not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0-65535, not {self.port}")
        for name in ("max_sessions_per_key", "max_request_bytes", "upload_max_size",
                     "bucket_quota_bytes",
                     "queue_size", "session_disk_bytes", "download_chunk_size",
                     "timeout_keep_alive", "timeout", "session_idle_timeout",
                     "list_max_entries", "max_queued_per_key", "shutdown_grace",
                     "header_timeout", "max_connections_per_client",
                     "memory_bytes", "max_run_seconds", "template_zygotes",
                     "template_idle_timeout", "paused_ttl", "max_paused_per_key",
                     "port_max_connections", "port_max_bytes"):  # fmt: skip
            value = getattr(self, name)
            if value is None and name == "timeout":
                continue  # the mode's default
            if not value > 0 or not math.isfinite(value):
                raise ConfigError(f"{name} must be positive, not {value!r}")
        if not 0 <= self.sandbox_cpu_quota <= _MAX_CPU_QUOTA:
            raise ConfigError(
                f"sandbox_cpu_quota must be 0 (none) to {_MAX_CPU_QUOTA} CPUs, "
                f"not {self.sandbox_cpu_quota!r}"
            )
        if self.cgroup_parent and not self.cgroup_parent.startswith("/sys/fs/cgroup/"):
            raise ConfigError("cgroup_parent names a folder below /sys/fs/cgroup/")
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
        try:
            object.__setattr__(self, "trusted_proxies", _networks(list(self.trusted_proxies)))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"trusted_proxies: {exc}") from exc
        self.network_ceiling()  # every [network] entry checked at start, with its name
        self.package_sources()

    def network_ceiling(self) -> NetworkCeiling:
        """The ``[network]`` ceiling: the most any sandbox of this server may reach.

        Raises:
            ConfigError: an entry that is no name, wildcard, address or CIDR.
        """
        from corral.errors import NetworkPolicyError
        from corral.network import NetworkCeiling

        try:
            return NetworkCeiling.parse(
                allow=self.allow,
                deny=self.deny,
                private_allow=self.private_allow,
                hosts=self.hosts,
                max_bytes=self.max_bytes,
                max_connections=self.max_connections,
                upstream_ca=self.upstream_ca,
            )
        except NetworkPolicyError as exc:
            raise ConfigError(f"[network] {exc}") from exc

    def package_sources(self) -> PackageSources:
        """``[packages]``: the index and wheelhouse pip and uv use inside a sandbox.

        Raises:
            ConfigError: an index that is no http(s) URL, a wheelhouse that is no folder.
        """
        from corral.engine import PackageSources

        return PackageSources(index_url=self.index_url, wheelhouse=self.wheelhouse)

    @property
    def execution_timeout(self) -> float:
        """Seconds per execution: ``timeout`` when set, else the mode's default, DIAL's
        container's fixed 60 s in container mode and ``Limits.timeout`` (30 s) otherwise."""
        if self.timeout is not None:
            return self.timeout
        return CONTAINER_TIMEOUT if self.mode == "container" else DEFAULT_LIMITS.timeout

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
        from corral.templates import TemplateStore

        return {
            "capacity": self.capacity,
            "queue_size": self.queue_size,
            "max_queued_per_tenant": self.max_queued_per_key,
            "limits": self.limits(),
            "session_idle_timeout": self.session_idle_timeout,
            "session_disk_bytes": self.session_disk_bytes,
            "paused_dir": self.data_dir / "paused",
            "session_idle_action": self.session_idle_action,
            "paused_ttl": self.paused_ttl,
            "max_paused_per_tenant": self.max_paused_per_key,
            "sandbox_cpu_quota": self.sandbox_cpu_quota,
            "cgroup_parent": self.cgroup_parent,
            "packages": self.package_sources(),
            "languages": self.languages(),
            "templates": TemplateStore(self.data_dir),
            "template_zygotes": self.template_zygotes,
            "template_idle_timeout": self.template_idle_timeout,
            **({} if self.uid_range is None else {"uid_range": self.uid_range}),
        }

    def language_paths(self) -> dict[str, str]:
        """``[languages.NAME] path`` of each language that has one."""
        paths: dict[str, str] = {}
        for name in _LANGUAGES:
            path = table_values(self.raw_toml, f"languages.{name}").get("path")
            if path:
                paths[name] = str(path)
        return paths

    def languages(self) -> Languages:
        """The toolchains this server's engine serves (``[languages.NAME]``, else PATH)."""
        from corral.engine import discover_languages  # the engine sits above this module

        return discover_languages(self.language_paths())

    def limits(self) -> Limits:
        """The default :class:`~corral.Limits` of every execution this server runs."""
        return Limits(timeout=self.execution_timeout, memory_bytes=self.memory_bytes)

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
        raw = _normalize(_read_toml(Path(path))) if path else {}
        values: dict[str, Any] = {"data_dir": _default_data_dir(env)}
        values.update(_from_toml(raw))
        values.update(_from_env(env))
        for name, value in given.items():
            if name not in _FIELDS or not _FIELDS[name].held:
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


def _networks(value: Any) -> tuple[str, ...]:
    """CIDRs (or single addresses) as a TOML list, or ``cidr,cidr`` in the environment;
    each normalised (``10.1.2.3/8`` is ``10.0.0.0/8``)."""
    if isinstance(value, str):
        value = [part for part in (p.strip() for p in value.split(",")) if part]
    if not isinstance(value, list):
        raise TypeError(f"expected a list of CIDRs, not {value!r}")
    networks = []
    for item in value:
        try:
            networks.append(str(ipaddress.ip_network(_text(item).strip(), strict=False)))
        except ValueError:
            raise ValueError(f"{item!r} is not an address or a CIDR") from None
    return tuple(networks)


def _entries(value: Any) -> tuple[str, ...]:
    """Network entries as a TOML list, or ``entry,entry`` in the environment (checked as a
    whole by ``Config.network_ceiling``)."""
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    if not isinstance(value, list):
        raise TypeError(f"expected a list of names, addresses or CIDRs, not {value!r}")
    return tuple(_text(item).strip() for item in value)


def _static_hosts(value: Any) -> Mapping[str, tuple[str, ...]]:
    """``{name = "address"}`` (or a list of addresses) in the file, ``name=address,...`` in
    the environment."""
    if isinstance(value, str):
        pairs: dict[str, list[str]] = {}
        for item in filter(None, (p.strip() for p in value.split(","))):
            name, sep, address = item.partition("=")
            if not sep or not name.strip() or not address.strip():
                raise ValueError("CORRAL_NETWORK_HOSTS items are name=address")
            pairs.setdefault(name.strip(), []).append(address.strip())
        return MappingProxyType({k: tuple(v) for k, v in pairs.items()})
    if not isinstance(value, Mapping):
        raise TypeError("network.hosts is a table of names to addresses")
    hosts: dict[str, tuple[str, ...]] = {}
    for name, answer in value.items():
        answers = [answer] if isinstance(answer, str) else answer
        if not isinstance(answers, list) or not answers:
            raise TypeError(f"network.hosts.{name}: an address or a list of addresses")
        hosts[_text(name)] = tuple(_text(a) for a in answers)
    return MappingProxyType(hosts)


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
    allowed = {"key", "user", "roles", "per_request", "network"}
    for entry in value:
        if not isinstance(entry, dict) or set(entry) - allowed:
            raise ValueError(
                f"an api_keys entry takes key, user, roles, per_request, network: {entry!r}"
            )
        per_request, network = entry.get("per_request", False), entry.get("network", True)
        if not isinstance(per_request, bool) or not isinstance(network, bool):
            raise TypeError("api_keys.per_request and api_keys.network must be true or false")
        key, user = _text(entry.get("key")), _text(entry.get("user"))
        if not key or not user:
            raise ValueError("an api_keys entry needs a non-empty key and user")
        granted = _roles(entry.get("roles", []))
        keys.append(
            ApiKey(key=key, user=user, roles=granted, per_request=per_request, network=network)
        )
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
    doc: str = ""
    """What the key means, for docs/configuration.md."""
    aliases: tuple[str, ...] = ()
    """Older names still accepted in the file (the camelCase of docs/code-interpreter.md §1)."""
    default: str | None = None
    """The default as the reference shows it, for keys :class:`Config` does not hold."""

    @property
    def held(self) -> bool:
        """Whether :class:`Config` has a field of this name (else a package reads the key)."""
        return self.default is None


def _positive(value: Any) -> int:
    number = _int(value)
    if number < 1:
        raise ValueError(f"expected a positive integer, not {number}")
    return number


def _names(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise TypeError("expected a list of strings")
    return list(value)


def _nonempty(value: Any) -> str:
    if not _text(value).strip():
        raise ValueError("expected a non-empty string")
    return str(value)


_STR, _INT, _NUM, _LIST, _BOOL = (str,), (int,), (int, float), (list,), (bool,)
_LANGUAGES = ("cpp", "nodejs", "java", "rust", "go", "typescript", "bash")
_TABLE_VALUE = (dict,)
_FIELDS: dict[str, _Field] = {
    # [server]
    "host": _Field("server", ("CORRAL_HOST",), _text, _STR,
        "Address to bind; `127.0.0.1` for gateway mode, `0.0.0.0` for container mode."),
    "port": _Field("server", ("CORRAL_PORT",), _int, _INT,
        "Port to bind; 8000 for gateway mode, 8080 (DIAL's image) for container mode."),
    "mode": _Field("server", ("CORRAL_MODE",), _text, _STR,
        "`gateway`: DIAL Core's operations, many sessions; `container`: one DIAL container."),
    "data_dir": _Field("server", ("CORRAL_DATA_DIR",), _path, _STR,
        "Files store (SQLite metadata and bytes), the local API key and session folders; "
        "default `$XDG_DATA_HOME/corral` (`~/.local/share/corral`)."),
    "api_keys": _Field("server", ("CORRAL_API_KEYS",), _api_keys, _LIST,
        "Gateway credentials, `[[server.api_keys]]` tables of `key`, `user`, `roles`, "
        "`per_request` (or `key:user[:role|role],...`); without one, `corral serve` makes a "
        "local key."),
    "create_code_app_roles": _Field("server.access", ("CORRAL_CREATE_CODE_APP_ROLES",), _roles,
        _LIST, "DIAL's `access.createCodeAppRoles`: unset allows everyone, `[]` no one."),
    "max_sessions_per_key": _Field("server", ("CORRAL_MAX_SESSIONS_PER_KEY",), _int, _INT,
        "Open sessions one key may hold; one more answers 429."),
    "max_request_bytes": _Field("server", ("CORRAL_MAX_REQUEST_BYTES",), _int, _INT,
        "Largest request body other than file uploads."),
    "upload_max_size": _Field("server", ("UPLOAD_MAX_SIZE",), _int, _INT,
        "Largest uploaded or transferred file (DIAL's `UPLOAD_MAX_SIZE`)."),
    "bucket_quota_bytes": _Field("server", ("CORRAL_BUCKET_QUOTA_BYTES",), _int, _INT,
        "Bytes one key's bucket of the files store may hold; a write past it answers 413."),
    "log_level": _Field("server", ("CORRAL_LOG_LEVEL", "LOG_LEVEL"), _text, _STR,
        "Logging level name."),
    "timeout_keep_alive": _Field("server", ("TIMEOUT_KEEP_ALIVE",), _int, _INT,
        "Seconds an idle HTTP connection is kept open (`TIMEOUT_KEEP_ALIVE`)."),
    "header_timeout": _Field("server", ("CORRAL_HEADER_TIMEOUT",), _float, _NUM,
        "Seconds a connection has to send its whole request head (from its opening, or from "
        "the first byte of a next request); past it the connection is closed."),
    "max_connections_per_client": _Field("server", ("CORRAL_MAX_CONNECTIONS_PER_CLIENT",),
        _int, _INT,
        "Open connections one client address may hold (a trusted proxy's are not counted); "
        "one more is answered 429 and closed."),
    "trusted_proxies": _Field("server", ("CORRAL_TRUSTED_PROXIES",), _networks, _LIST,
        "Addresses or CIDRs of reverse proxies (`cidr,cidr` in the variable): only a request "
        "from one of them has its client taken from `X-Forwarded-For` (the nearest address "
        "not itself trusted); `Forwarded` is never read. Unset trusts no one."),
    "shutdown_grace": _Field("server", ("CORRAL_SHUTDOWN_GRACE",), _float, _NUM,
        "Seconds runs in flight may take to finish after SIGTERM before they are cancelled."),
    "open_run_code": _Field("server", ("CORRAL_OPEN_RUN_CODE",), _bool, _BOOL,
        "Serve `/run_code` and `/run_code_batch` without an API key (a trainer's private "
        "network: verl and SandboxFusion's client send none)."),
    # [engine]
    "capacity": _Field("engine", ("CORRAL_CAPACITY",), _optional_int, _INT,
        "Concurrent one-shot runs and cases; unset (or `auto`) means one per CPU. A session's "
        "runs take no slot where it has a cgroup (its CPU is shared by weight)."),
    "queue_size": _Field("engine", ("CORRAL_QUEUE_SIZE",), _int, _INT,
        "Runs waiting for a worker; beyond that a run is refused as busy."),
    "timeout": _Field("engine", ("CORRAL_TIMEOUT",), _float, _NUM,
        "Seconds for one execution (queue + start + run): the one default, `Limits.timeout` "
        "(30 s), except in container mode, where it is DIAL's fixed 60 s; a "
        "request may ask for less, never more."),
    "session_idle_timeout": _Field("engine", ("CORRAL_SESSION_IDLE_TIMEOUT",), _float, _NUM,
        "Seconds after its last use when a session expires (DIAL's `sessionTtl`)."),
    "session_idle_action": _Field("engine", ("CORRAL_SESSION_IDLE_ACTION",), _text, _STR,
        "What an idle session becomes after `session_idle_timeout`: `close` (DIAL's way) or "
        "`pause` (frozen where it is; its next operation resumes it)."),
    "paused_ttl": _Field("engine", ("CORRAL_PAUSED_TTL",), _float, _NUM,
        "Seconds a paused session or sandbox is kept (in memory or, after a restart, in "
        "`data_dir/paused`) before it is closed."),
    "max_paused_per_key": _Field("engine", ("CORRAL_MAX_PAUSED_PER_KEY",), _int, _INT,
        "Paused sessions and sandboxes one key may keep; past it the oldest is closed."),
    "session_disk_bytes": _Field("engine", ("CORRAL_SESSION_DISK_BYTES",), _int, _INT,
        "Disk quota of one session folder (a gateway session's tmpfs)."),
    "list_max_entries": _Field("engine", ("CORRAL_LIST_MAX_ENTRIES",), _int, _INT,
        "Files a session listing returns at most; a cut listing says so."),
    "max_queued_per_key": _Field("engine", ("CORRAL_MAX_QUEUED_PER_KEY",), _int, _INT,
        "Runs one API key may have waiting for a worker; more are answered busy."),
    "uid_range": _Field("engine", ("CORRAL_UID_RANGE",), _uid_range, _LIST,
        "Host uids for the sandbox as `[first, count]` (`first:count` in the variable): one "
        "per live worker or session; each of the two zygotes leases a block of 1024 of its "
        "half host-wide, so servers sharing a range never share a uid; unset is corral's "
        "default block (see `corral doctor`)."),
    "memory_bytes": _Field("engine", ("CORRAL_MEMORY_BYTES",), _int, _INT,
        "Memory one run, session or E2B sandbox may use on top of the runtime: the sum of all "
        "its processes and the kernel memory they cause, where cgroups are in force (and each "
        "process's address space beyond the runtime's); a request may ask for less."),
    "sandbox_cpu_quota": _Field("engine", ("CORRAL_SANDBOX_CPU_QUOTA",), _float, _NUM,
        "CPUs one sandbox (a run, a session, an E2B sandbox, with all its processes) may use "
        "at most, enforced by its cgroup; 0 is no quota: sandboxes then share the CPUs by "
        "equal weight, keys' sessions fairly between keys."),
    "cgroup_parent": _Field("engine", ("CORRAL_CGROUP_PARENT",), _text, _STR,
        "cgroup v2 only: a folder below /sys/fs/cgroup delegated to corral (systemd's "
        "`Delegate=yes`), under which corral makes its sandboxes' cgroups; unset is the "
        "cgroup corral runs in. See docs/cgroups.md."),
    # [network]
    "allow": _Field("network", ("CORRAL_NETWORK_ALLOW",), _entries, _LIST,
        "The ceiling: what a sandbox may ever reach: domains (`pypi.org`), wildcards "
        "(`*.example.com`: names below it; `*`: every name), IP addresses and CIDRs. Empty: "
        "no sandbox has any network. E2B sandboxes start with all of it; corral's own routes "
        "ask for a part of it; DIAL's routes, MCP and `/run_code` never have one."),
    "deny": _Field("network", ("CORRAL_NETWORK_DENY",), _entries, _LIST,
        "Entries never reached, whatever `allow` or a sandbox's policy says."),
    "private_allow": _Field("network", ("CORRAL_NETWORK_PRIVATE_ALLOW",), _entries, _LIST,
        "Addresses and CIDRs outside the public internet a sandbox may reach when `allow` "
        "also does (an internal mirror at `10.1.2.0/24`); loopback, link-local "
        "(169.254.169.254), the host's own addresses and every other private range never."),
    "hosts": _Field("network", ("CORRAL_NETWORK_HOSTS",), _static_hosts, _TABLE_VALUE,
        'Static answers of corral\'s resolver: `{"mirror.internal" = "10.1.2.3"}` '
        "(`name=address,...` in the variable)."),
    "max_bytes": _Field("network", ("CORRAL_NETWORK_MAX_BYTES",), _int, _INT,
        "Bytes one sandbox may move through the network, both ways; past it its "
        "connections are cut."),
    "max_connections": _Field("network", ("CORRAL_NETWORK_MAX_CONNECTIONS",), _int, _INT,
        "Connections one sandbox may hold open at once; more are refused."),
    "upstream_ca": _Field("network", ("CORRAL_NETWORK_UPSTREAM_CA",), _text, _STR,
        "A PEM bundle the egress side trusts for upstream TLS besides the system's (an "
        "internal mirror's CA)."),
    # [e2b]
    "max_run_seconds": _Field("e2b", ("CORRAL_E2B_MAX_RUN_SECONDS",), _float, _NUM,
        "Seconds one E2B `run_code` may take at most. Within it a run is bounded by the "
        "SDK's own `timeout` (300 s by default: the SDK hangs up, which interrupts the run) "
        "and by the sandbox's lifetime, not by `[engine] timeout`."),
    "e2b_domain": _Field("e2b", ("CORRAL_E2B_DOMAIN",), _text, _STR,
        "The domain of `get_host(port)`: `<port>-<id>.<domain>` (a wildcard DNS name that "
        "reaches this server); unset is the host the SDK's create request came to.",
        ("domain",)),
    "port_max_connections": _Field("e2b", ("CORRAL_E2B_PORT_MAX_CONNECTIONS",), _int, _INT,
        "Requests and WebSockets one E2B sandbox's ports may have open at once (more: 429)."),
    "port_max_bytes": _Field("e2b", ("CORRAL_E2B_PORT_MAX_BYTES",), _int, _INT,
        "Bytes one E2B sandbox may move through its ports, both ways, in its life; past it "
        "they are cut and refused (429)."),
    # [packages]
    "index_url": _Field("packages", ("CORRAL_PACKAGES_INDEX_URL",), _text, _STR,
        "The index pip (and uv) use in a sandbox whose network allows its host."),
    "wheelhouse": _Field("packages", ("CORRAL_PACKAGES_WHEELHOUSE",), _text, _STR,
        "A folder of wheels pip installs from in a sandbox without the index, offline."),
    # [templates]
    "template_zygotes": _Field("templates", ("CORRAL_TEMPLATE_ZYGOTES",), _int, _INT,
        "Template zygotes up at once; the least recently used idle one makes room."),
    "template_idle_timeout": _Field("templates", ("CORRAL_TEMPLATE_IDLE_TIMEOUT",), _float, _NUM,
        "Seconds a template's zygote stays up with no run and no live session from it."),
    # [container]
    "session_id": _Field("container", ("SESSION_ID",), _text, _STR,
        "The `x-dial-session-id` every request must carry (`SESSION_ID`); unset accepts any."),
    "mount_folder": _Field("container", ("MOUNT_FOLDER",), _path, _STR,
        "The session's folder on the host (`MOUNT_FOLDER`): uploads land there, the code "
        "sees it read-write at the same path, and it outlives a restart."),
    "download_chunk_size": _Field("container", ("DOWNLOAD_CHUNK_SIZE",), _int, _INT,
        "Bytes per chunk of a streamed download (`DOWNLOAD_CHUNK_SIZE`)."),
    # [code_interpreter]: read by corral.tools (camelCase aliases: docs/code-interpreter.md §1)
    "code_interpreter.max_calls": _Field("code_interpreter", (), _positive, _INT,
        "Code-running calls one invocation may make: a chat turn, one HTTP request. MCP "
        "sessions are bounded by `[mcp] max_calls_per_session` instead.",
        ("maxCalls",), "10"),
    "code_interpreter.timeout_ms": _Field("code_interpreter", (), _positive, _INT,
        "Whole-call deadline in milliseconds: queue, worker start and run together.",
        ("timeoutMs",), "30000"),
    "code_interpreter.max_code_chars": _Field("code_interpreter", (), _positive, _INT,
        "Longest code one call may send.", ("maxCodeCharacters",), "20000"),
    "code_interpreter.max_output_chars": _Field("code_interpreter", (), _positive, _INT,
        "Characters kept per output channel (stdout, stderr, result).",
        ("maxOutputCharacters",), "64000"),
    "code_interpreter.max_sources": _Field("code_interpreter", (), _positive, _INT,
        "Unique source ids one call may mount.", ("maxSources",), "4"),
    # [languages.NAME]: read by Config.language_paths
    **{f"languages.{name}.path": _Field(f"languages.{name}", (), _nonempty, _STR,
        f"The {name} toolchain's root (the folder holding its `bin/`), bound read-only into "
        "every sandbox; unset: found on `PATH` when the server starts.", (), "unset")
       for name in _LANGUAGES},
    # [mcp]: read by corral.mcp
    "mcp.max_calls_per_session": _Field("mcp", (), _positive, _INT,
        "Code-running calls one MCP session may make; unset means no cap (a desktop client "
        "keeps one session for as long as it runs).", (), "unset"),
    "mcp.max_embedded_file_bytes": _Field("mcp", (), _positive, _INT,
        "Largest generated file `code_session` embeds in its result; larger ones come back "
        "as resource links, read with `resources/read`.", (), "1048576"),
    # [mistral]: read by corral.mistral (MISTRAL_API_KEY and MISTRAL_BASE_URL are variables)
    "mistral.knowledge.search_model": _Field("mistral.knowledge", (), _nonempty, _STR,
        "Model of every Conversations call (web search, knowledge).", ("searchModel",),
        '"mistral-small-latest"'),
    "mistral.connector_tools.enabled": _Field("mistral.connector_tools",
        ("MISTRAL_CONNECTOR_TOOLS",), _bool, _BOOL,
        "Offer the connector loader tools (when `MISTRAL_API_KEY` is set); the file wins "
        "over the variable.", (), "true"),
    "mistral.connector_tools.auto_load": _Field("mistral.connector_tools", (), _names, _LIST,
        "Connectors loaded silently when a session starts.", ("autoLoad",), "[]"),
}  # fmt: skip
_ENV_NAMES = frozenset({"CORRAL_CONFIG"}.union(*(f.env for f in _FIELDS.values())))
_TABLE_ALIASES = {"mistral.connectorTools": "mistral.connector_tools"}
_TABLES = tuple(dict.fromkeys(f.table for f in _FIELDS.values()))
"""Every table of ``corral.toml``, parents before their children."""


def _key(name: str) -> str:
    return name.rpartition(".")[2]


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


def _children(table: str) -> dict[str, str]:
    """Subtables of ``table`` (``""`` is the top level), by spelling: name -> canonical name."""
    depth = table.count(".") + 1 if table else 0
    found: dict[str, str] = {}
    for name in (*_TABLES, *_TABLE_ALIASES):
        parts = name.split(".")
        if len(parts) > depth and (not table or name.startswith(table + ".")):
            spelled = ".".join(parts[: depth + 1])
            found[parts[depth]] = _key(_TABLE_ALIASES.get(spelled, spelled))
    return found


def _section(raw: Any, table: str) -> dict[str, Any]:
    """One table of ``raw`` with snake_case keys, checked: no unknown key, no key twice,
    every value of its declared type."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"[{table}] must be a table")
    fields = {_key(n): f for n, f in _FIELDS.items() if f.table == table}
    spelled = _children(table)
    for name, field_spec in fields.items():
        spelled.update(dict.fromkeys((*field_spec.aliases, name), name))
    out: dict[str, Any] = {}
    for key, value in raw.items():
        canonical = spelled.get(key)
        where = f"{table}.{key}" if table else key
        if canonical is None:
            place = f"in [{table}]" if table else "at the top level of corral.toml"
            known = ", ".join(sorted(set(spelled.values())))
            raise ConfigError(f"unknown key {key!r} {place} (known: {known})")
        if canonical in out:
            raise ConfigError(f"{where}: given twice (as {canonical!r} and an older name)")
        if canonical not in fields:
            out[canonical] = _section(value, f"{table}.{canonical}" if table else canonical)
            continue
        spec = fields[canonical]
        if (isinstance(value, bool) and bool not in spec.toml) or not isinstance(value, spec.toml):
            raise ConfigError(f"{where}: wrong type {type(value).__name__}")
        _cast(where, spec.cast, value)
        out[canonical] = value
    return out


def _normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The whole file checked, every key and table in its snake_case name."""
    return _section(raw, "")


def table_values(raw: Mapping[str, Any], table: str) -> dict[str, Any]:
    """The keys of one table (``"code_interpreter"``, ``"mistral.knowledge"``) of a parsed
    ``corral.toml``, snake_case, checked against the table of fields; ``{}`` when absent.

    Raises:
        ConfigError: an unknown key, a key given twice or a value of the wrong type.
    """
    section: Any = raw
    for part in table.split("."):
        if not isinstance(section, Mapping):
            return {}
        aliases = [a.rpartition(".")[2] for a, c in _TABLE_ALIASES.items() if _key(c) == part]
        found = [n for n in (part, *aliases) if n in section]
        if not found:
            return {}
        section = section[found[0]]
    keys = {_key(n) for n, f in _FIELDS.items() if f.table == table}
    return {k: v for k, v in _section(section, table).items() if k in keys}


def _from_toml(raw: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, spec in _FIELDS.items():
        if not spec.held:
            continue
        section = table_values(raw, spec.table)
        if name in section:
            values[name] = _cast(f"{spec.table}.{name}", spec.cast, section[name])
    return values


def _from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    unknown = sorted(n for n in environ if n.startswith("CORRAL_") and n not in _ENV_NAMES)
    if unknown:
        raise ConfigError(f"unknown environment variable {unknown[0]} (CORRAL_* names are checked)")
    values: dict[str, Any] = {}
    for name, spec in _FIELDS.items():
        if not spec.held:
            continue
        for var in spec.env:
            if var in environ:
                values[name] = _cast(var, spec.cast, environ[var])
                break
    return values


_KINDS = {
    _STR: "string",
    _INT: "integer",
    _NUM: "number",
    _LIST: "array",
    _BOOL: "boolean",
    _TABLE_VALUE: "table",
}


def _default_text(name: str, spec: _Field) -> str:
    if spec.default is not None:
        return spec.default
    if name == "data_dir":
        return "see below"
    if name == "timeout":
        return f"{DEFAULT_LIMITS.timeout:g} ({CONTAINER_TIMEOUT:g} in container mode)"
    found = next(f for f in dataclasses.fields(Config) if f.name == name)
    value = found.default
    if found.default_factory is not dataclasses.MISSING:
        value = found.default_factory()
    if value == {}:
        return "{}"
    if value is None or value == ():
        return "unset"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, Path):
        return f'"{value}"'
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value % _MIB == 0
        and value >= _MIB
    ):
        return f"{value} ({value // _MIB} MiB)"
    return f"{value:g}" if isinstance(value, float) else str(value)


def reference_markdown() -> str:
    """docs/configuration.md: every key of ``corral.toml``, from the table of fields."""
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from corral/_config.py by scripts/make_config_docs.py; do not edit. -->",
        "",
        "corral reads `corral.toml` (`--config FILE` or `CORRAL_CONFIG`), then environment",
        "variables, then flags: a flag beats a variable, a variable beats the file, the file",
        "beats the default. Every key is snake_case; an unknown key, table or `CORRAL_*`",
        "variable is refused at start-up with its name. Older camelCase names (`maxCalls`, ...)",
        "are accepted as aliases.",
    ]
    for table in _TABLES:
        rows = [(n, f) for n, f in _FIELDS.items() if f.table == table]
        lines += ["", f"## `[{table}]`", "", "| key | type | default | environment | meaning |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for name, spec in rows:
            key = _key(name)
            if spec.aliases:
                key += " (" + ", ".join(f"`{a}`" for a in spec.aliases) + ")"
                key = f"`{_key(name)}`" + key[len(_key(name)) :]
            else:
                key = f"`{key}`"
            env = ", ".join(f"`{v}`" for v in spec.env) or ""
            kind = _KINDS.get(spec.toml, "value")
            lines.append(f"| {key} | {kind} | {_default_text(name, spec)} | {env} | {spec.doc} |")
    aliases = ", ".join(f"`[{a}]` for `[{c}]`" for a, c in _TABLE_ALIASES.items())
    lines += ["", f"Table aliases: {aliases}.", ""]
    return "\n".join(lines)

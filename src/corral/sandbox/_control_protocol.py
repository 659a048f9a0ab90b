"""The typed control channels: engine and zygote, engine and session holder.

One message per SOCK_SEQPACKET packet (``_seqpacket``): a JSON object whose ``"t"`` names the
message, descriptors beside it as SCM_RIGHTS (``_descriptors``). Every message is a frozen
dataclass below, encoded by :func:`encode` and decoded by :func:`decode` against the kinds
the receiver expects. The decoder is strict: an unknown or unexpected ``t``, a missing or
extra field, a value of another type (a bool is no int) or one its ``__post_init__`` refuses,
and the whole message is refused (None). The packet itself is bounded by ``MESSAGE_BYTES``.

Both ends are corral's own processes, but a holder lives inside its sandbox's namespaces and
the zygote beside every worker, so neither side takes the other's word on shape.

Engine to zygote: :class:`ZygoteConfig` (first), :class:`UseCgroups` (once, with the
descriptors of its cgroup folders), then :class:`Spawn` (with the new worker's socket and
pipes) and :class:`Sync`. Zygote to engine: :class:`Hello` or :class:`StartFailed`, then per
spawn :class:`Spawned` (with a pidfd) or :class:`SpawnRefused`, :class:`OutOfMemory` for a
reaped worker whose cgroup saw a memory kill, and :class:`Synced`. Engine to holder:
:class:`StartInterpreter`, :class:`Interrupt`, :class:`KillInterpreter`, :class:`Exec` (with
the command's pipes), :class:`SignalCommand`;
holder to engine: :class:`HolderReady`, :class:`InterpreterStarted`, :class:`Interrupted`,
:class:`InterpreterExited`.

Standard library only: the zygote, holders and commands import it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import posixpath
import re
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

__all__ = [
    "MAX_COMMAND_ARGS",
    "MAX_COMMAND_ENV",
    "MAX_INTERPRETERS",
    "NO_FILES",
    "TEMPLATE_LAYER",
    "WHEELHOUSE",
    "CgroupKnob",
    "ControlMessage",
    "Exec",
    "Hello",
    "HolderReady",
    "InterpreterExited",
    "InterpreterStarted",
    "Interrupt",
    "Interrupted",
    "KillInterpreter",
    "OutOfMemory",
    "SandboxFiles",
    "SignalCommand",
    "Spawn",
    "SpawnRefused",
    "Spawned",
    "StartFailed",
    "StartInterpreter",
    "StaticLimits",
    "Sync",
    "Synced",
    "UseCgroups",
    "ZygoteConfig",
    "decode",
    "encode",
    "worker_cgroup_name",
]

MAX_INTERPRETERS = 16
"""Interpreters a session holder keeps at once: its own and those beside it (E2B's
contexts)."""
MAX_COMMAND_ARGS = 4096
"""Arguments of one command (``Exec``)."""
MAX_COMMAND_ENV = 4096
"""Environment variables of one command."""
_COMMAND_SIGNALS = frozenset({2, 9, 15})  # SIGINT, SIGKILL, SIGTERM
_KNOB_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._")
_GROUP_NAME = re.compile(r"k-[0-9a-z]{1,64}")


class _Invalid(ValueError):
    """A message that does not have its kind's shape."""


def _positive(**values: int) -> None:
    for name, value in values.items():
        if value <= 0:
            raise _Invalid(f"{name} must be positive")


@dataclass(frozen=True, slots=True, kw_only=True)
class StaticLimits:
    """The limits fixed when a worker is made: its file systems and the static rlimits."""

    work_bytes: int
    """Size of its ``/work`` and ``/tmp``."""
    pids: int
    file_bytes: int
    open_files: int

    def __post_init__(self) -> None:
        _positive(
            work_bytes=self.work_bytes,
            pids=self.pids,
            file_bytes=self.file_bytes,
            open_files=self.open_files,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CgroupKnob:
    """A file of a new worker's cgroup and the value written to it before the worker runs."""

    hierarchy: str
    """Which of the zygote's cgroup hierarchies (``ZygoteConfig.cgroups``)."""
    name: str
    """The file's name, such as ``memory.limit_in_bytes``: no path."""
    value: str

    def __post_init__(self) -> None:
        if not self.name or not set(self.name) <= _KNOB_NAME_CHARS or ".." in self.name:
            raise _Invalid("a cgroup knob is a plain file name")


WHEELHOUSE = "/opt/corral/wheelhouse"
"""Where a sandbox sees the operator's wheelhouse (``SandboxFiles.wheelhouse``)."""
TEMPLATE_LAYER = "/opt/corral/template"
"""Where a template's sandbox sees its layer (``SandboxFiles.layer``), read-only."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxFiles:
    """What a zygote's template root adds to the host's files, the same for all its sandboxes."""

    extra_ca: str = ""
    """A PEM certificate every sandbox trusts besides the host's (corral's egress CA)."""
    etc: tuple[tuple[str, str], ...] = ()
    """(path under /etc, text): the operator's package index for pip and uv, say."""
    wheelhouse: str = ""
    """A host folder of wheels, bound read-only at ``WHEELHOUSE`` in every sandbox."""
    toolchains: tuple[str, ...] = ()
    """Host folders of language toolchains, bound read-only at their own paths."""
    layer: str = ""
    """A template's layer: a host folder bound read-only at ``TEMPLATE_LAYER``, whose
    ``site-packages`` every Python in the sandbox imports from (after the sandbox's own)."""
    layer_env: tuple[tuple[str, str], ...] = ()
    """The template's environment variables, set in every sandbox process (never in the
    zygote's own environment, which starts as root on the host)."""
    layer_workdir: str = ""
    """Where code starts, relative to the sandbox's home ("": the home itself)."""
    layer_preload: tuple[str, ...] = ()
    """Modules each worker imports inside its sandbox before it reports ready: never the
    zygote, which keeps capabilities on the host and must not run a layer's code."""

    def __post_init__(self) -> None:
        for path, _text in self.etc:
            if not _plain_relpath(path):
                raise _Invalid(f"{path!r} is no path under /etc")
        for root in self.toolchains:
            if not root.startswith("/") or posixpath.normpath(root) != root or root == "/":
                raise _Invalid(f"toolchain folder {root!r} is no absolute, normal path")
        if self.layer_workdir and not _plain_relpath(self.layer_workdir):
            raise _Invalid(f"{self.layer_workdir!r} is no folder under the home")
        for name, value in self.layer_env:
            if not _ENV_NAME.fullmatch(name) or "\0" in value:
                raise _Invalid(f"{name!r} is no environment variable")
        for module in self.layer_preload:
            if not all(part.isidentifier() for part in module.split(".")):
                raise _Invalid(f"{module!r} is no module name")


def _plain_relpath(path: str) -> bool:
    parts = path.split("/")
    return not path.startswith("/") and all(p and p not in (".", "..") for p in parts)


NO_FILES = SandboxFiles()
"""The host's files and nothing more."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ZygoteConfig:
    """The zygote's configuration, its first message (never its command line)."""

    KIND: ClassVar[str] = "config"
    preload: tuple[str, ...]
    uids: tuple[int, int]
    """(first, count): the block of host uids leased for it; the first is its own."""
    cache_dir: str
    data_dir: str | None = None
    """A host folder session holders bind as their data folder instead of a tmpfs."""
    prewarm: bool = True
    files: SandboxFiles = NO_FILES


@dataclass(frozen=True, slots=True, kw_only=True)
class UseCgroups:
    """The zygote's delegated cgroup folders: one descriptor per hierarchy, in this order.

    Sent once, before the first ``Spawn``; a zygote without it makes no cgroups."""

    KIND: ClassVar[str] = "cgroups"
    hierarchies: tuple[str, ...]
    group_knobs: tuple[CgroupKnob, ...] = ()
    """Written into a group's folder when the zygote makes it (cgroup v2 enables the
    controllers of the group's children so)."""
    oom_events: tuple[str, str] | None = None
    """(hierarchy, file) of a worker's cgroup that counts its ``oom_kill`` events: read at
    its reap, before the cgroup goes, so the engine learns of a kill it came too late for."""

    def __post_init__(self) -> None:
        if len(set(self.hierarchies)) != len(self.hierarchies):
            raise _Invalid("a hierarchy is named twice")


@dataclass(frozen=True, slots=True, kw_only=True)
class Spawn:
    """Clone a worker: its protocol socket, stdout and stderr come along."""

    KIND: ClassVar[str] = "spawn"
    id: int
    static: StaticLimits
    session_disk_bytes: int | None = None
    """A session holder with a data file system of this size; a one-shot worker when None."""
    cgroup: tuple[CgroupKnob, ...] = ()
    """Written into the worker's cgroup before it runs (its limits)."""
    cgroup_group: str | None = None
    """A group in the zygote's folder to make the worker's cgroup in (a key's sessions)."""

    def __post_init__(self) -> None:
        group = self.cgroup_group
        if group is not None and not _GROUP_NAME.fullmatch(group):
            raise _Invalid("a cgroup group is k- and letters or digits")


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello:
    KIND: ClassVar[str] = "hello"
    pid: int
    python: str
    versions: dict[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class StartFailed:
    """The zygote could not build the sandbox on this host."""

    KIND: ClassVar[str] = "failed"
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Spawned:
    """A worker was cloned and mapped; its pidfd comes with this message."""

    KIND: ClassVar[str] = "spawned"
    id: int
    pid: int
    uid: int
    """Its host uid and gid."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SpawnRefused:
    KIND: ClassVar[str] = "refused"
    id: int
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OutOfMemory:
    """A reaped worker's cgroup had processes killed for memory (sent before it goes)."""

    KIND: ClassVar[str] = "oom"
    pid: int
    kills: int
    """The cgroup's own count, as the engine reads it (a reused cgroup's counts those of
    the workers it held before too: the engine counts from its reading at the run's start)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Sync:
    """Answered with ``Synced`` of the same number once everything before it is done."""

    KIND: ClassVar[str] = "sync"
    n: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Synced:
    KIND: ClassVar[str] = "synced"
    n: int


def _check_slot(slot: int) -> None:
    if not 0 <= slot < MAX_INTERPRETERS:
        raise _Invalid(f"an interpreter's slot is 0 to {MAX_INTERPRETERS - 1}")


@dataclass(frozen=True, slots=True, kw_only=True)
class StartInterpreter:
    """Fork a fresh interpreter in ``slot``; its protocol socket, stdout and stderr come
    along. Slot 0 is the session's own; the others run beside it (E2B's code contexts)."""

    KIND: ClassVar[str] = "start"
    slot: int = 0

    def __post_init__(self) -> None:
        _check_slot(self.slot)


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupt:
    """SIGINT to the interpreter in ``slot``; answered with ``Interrupted`` of the same
    number."""

    KIND: ClassVar[str] = "interrupt"
    n: int
    slot: int = 0

    def __post_init__(self) -> None:
        _check_slot(self.slot)


@dataclass(frozen=True, slots=True, kw_only=True)
class KillInterpreter:
    """Slot 0: kill every process of the session but the holder. Another slot: kill that
    interpreter and its process group (what it started and left in it)."""

    KIND: ClassVar[str] = "kill"
    slot: int = 0

    def __post_init__(self) -> None:
        _check_slot(self.slot)


@dataclass(frozen=True, slots=True, kw_only=True)
class Exec:
    """Start a command beside the interpreter: stdin, stdout, stderr and a status pipe come
    along."""

    KIND: ClassVar[str] = "exec"
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    memory_bytes: int
    cpu_seconds: int

    def __post_init__(self) -> None:
        if not self.argv or len(self.argv) > MAX_COMMAND_ARGS or len(self.env) > MAX_COMMAND_ENV:
            raise _Invalid("a command needs 1 to 4096 arguments and at most 4096 variables")
        if any("\0" in arg for arg in self.argv) or "\0" in self.cwd:
            raise _Invalid("a command's arguments hold no NUL")
        if any(not key or "=" in key or "\0" in key + value for key, value in self.env.items()):
            raise _Invalid("a bad environment variable")
        _positive(memory_bytes=self.memory_bytes, cpu_seconds=self.cpu_seconds)


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalCommand:
    KIND: ClassVar[str] = "signal"
    pid: int
    signal: int

    def __post_init__(self) -> None:
        if self.signal not in _COMMAND_SIGNALS:
            raise _Invalid("a command takes SIGINT, SIGTERM or SIGKILL only")


@dataclass(frozen=True, slots=True)
class HolderReady:
    KIND: ClassVar[str] = "ready"


@dataclass(frozen=True, slots=True, kw_only=True)
class InterpreterStarted:
    KIND: ClassVar[str] = "started"
    slot: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupted:
    KIND: ClassVar[str] = "interrupted"
    n: int


@dataclass(frozen=True, slots=True, kw_only=True)
class InterpreterExited:
    """The interpreter in ``slot`` is gone, and what it left with it (slot 0: every process
    of the session but the holder)."""

    KIND: ClassVar[str] = "exited"
    code: int
    slot: int = 0


ControlMessage = (
    ZygoteConfig
    | UseCgroups
    | Spawn
    | Hello
    | StartFailed
    | Spawned
    | SpawnRefused
    | OutOfMemory
    | Sync
    | Synced
    | StartInterpreter
    | Interrupt
    | KillInterpreter
    | Exec
    | SignalCommand
    | HolderReady
    | InterpreterStarted
    | Interrupted
    | InterpreterExited
)
A = TypeVar("A", bound=ControlMessage)
B = TypeVar("B", bound=ControlMessage)
C = TypeVar("C", bound=ControlMessage)
D = TypeVar("D", bound=ControlMessage)
E = TypeVar("E", bound=ControlMessage)


def worker_cgroup_name(uid: int) -> str:
    """The name of the cgroup of the worker with host uid ``uid`` (unique in its zygote)."""
    return f"w{uid}"


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_nested(item) for item in value]
    kind: type = type(value)
    if hasattr(kind, "__dataclass_fields__"):
        return {name: _nested(getattr(value, name)) for name in _field_names(kind)}
    return value


_SCALARS = frozenset({int, str, bool, float, type(None)})


def _nested(value: Any) -> Any:
    """A field's JSON form. A nested message part (a spawn's limits and its knobs, the same
    for every worker of a pool) is converted once and its form shared, never changed; the
    rest (a command's arguments, say) is converted every time and never kept."""
    if type(value) in _SCALARS:
        return value
    if _is_part(value) or (type(value) is tuple and value and _is_part(value[0])):
        try:
            return _plain_part(value)
        except TypeError:  # unhashable (a mapping inside)
            pass
    return _plain(value)


def _is_part(value: Any) -> bool:
    return hasattr(type(value), "__dataclass_fields__")


@functools.lru_cache(maxsize=256)
def _plain_part(value: Any) -> Any:
    return _plain(value)


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    """A message type's fields, found once: every spawn encodes the same few types."""
    return tuple(f.name for f in dataclasses.fields(kind))


# One encoder, made at import: ``json.dumps`` with separators builds a new one per call, and
# every object the zygote touches between two clones costs it a copied page.
_encode_json: Callable[[Any], str] = json.JSONEncoder(separators=(",", ":")).encode


def _no_default(value: object) -> object:
    raise TypeError(f"{type(value).__name__} has no wire form")


def _c_encoder() -> Callable[[Any], str] | None:
    """``_encode_json`` without its Python layers, CPython's C encoder called directly:
    ``JSONEncoder.encode`` makes a new C encoder, a marker dict and a closure on every call,
    a dozen pages of the zygote's written per spawn. No circularity check: a message is a
    tree ``_plain`` has just built. None where the C encoder is not this shape."""
    make = getattr(json.encoder, "c_make_encoder", None)
    escape = getattr(json.encoder, "c_encode_basestring_ascii", None)
    if make is None or escape is None:
        return None
    try:
        chunks = make(None, _no_default, escape, None, ":", ",", False, False, True)
    except TypeError:
        return None

    def encode_json(value: Any) -> str:
        return "".join(chunks(value, 0))

    sample = {"a": [1, -2.5, "\u00e9\n", None, True, {"b": ""}], "c": float("inf")}
    try:
        same = encode_json(sample) == _encode_json(sample)
    except (TypeError, ValueError):
        same = False
    return encode_json if same else None


_encode_json = _c_encoder() or _encode_json


# ``raw_decode`` on the text, not ``json.loads``: no encoding detection, no whitespace
# scans, since every packet is ``encode``'s UTF-8 without any.
_decode_json = json.JSONDecoder().raw_decode


def encode(message: ControlMessage) -> bytes:
    """The packet for ``message``."""
    packet = _plain(message)
    packet["t"] = message.KIND
    return _encode_json(packet).encode()


_Check = Callable[[Any], Any]


def _exact(kind: type) -> _Check:
    def check(value: Any) -> Any:
        if type(value) is not kind:  # a bool is an int to isinstance, not here
            raise _Invalid(f"expected {kind.__name__}")
        return value

    return check


def _number(value: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise _Invalid("expected a finite number")
    return float(value)


def _checker(hint: Any) -> _Check:
    """A function that turns a decoded JSON value into ``hint``'s type, or raises."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in (int, str, bool):
        return _exact(hint)
    if hint is float:
        return _number
    if origin in (typing.Union, types.UnionType):
        options = [_checker(arg) for arg in args if arg is not type(None)]
        (only,) = options  # X | None is the one union these messages use

        def optional(value: Any) -> Any:
            return None if value is None else only(value)

        return optional
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            each = _checker(args[0])

            def homogeneous(value: Any) -> tuple[Any, ...]:
                if type(value) is not list:
                    raise _Invalid("expected a list")
                return tuple(each(item) for item in value)

            return homogeneous
        fixed = [_checker(arg) for arg in args]

        def pair(value: Any) -> tuple[Any, ...]:
            if type(value) is not list or len(value) != len(fixed):
                raise _Invalid(f"expected a list of {len(fixed)}")
            return tuple(check(item) for check, item in zip(fixed, value, strict=True))

        return pair
    if origin is dict:
        key_check, value_check = (_checker(arg) for arg in args)

        def mapping(value: Any) -> dict[Any, Any]:
            if type(value) is not dict:
                raise _Invalid("expected an object")
            return {key_check(k): value_check(v) for k, v in value.items()}

        return mapping
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _structure(hint)
    raise TypeError(f"no wire form for {hint!r}")  # a programming error, found at import


_PART_SCALARS = (int, str, bool)
_KNOWN_PARTS = 64
"""Decoded message parts remembered per type (a pool's limits and knobs, a few runs' own)."""


def _structure(cls: type) -> _Check:
    hints = typing.get_type_hints(cls, vars(sys.modules[__name__]))
    fields = {f.name: _checker(hints[f.name]) for f in dataclasses.fields(cls)}
    required = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }

    def build(value: Any) -> Any:
        if type(value) is not dict or not required <= value.keys() <= fields.keys():
            raise _Invalid(f"{cls.__name__} has other fields")
        return cls(**{name: fields[name](item) for name, item in value.items()})

    if hasattr(cls, "KIND") or not all(hints[name] in _PART_SCALARS for name in fields):
        return build
    # A message part of scalars (a spawn's limits, a knob): the same few arrive with every
    # spawn, and one built and checked before is handed out again (it is frozen).
    known: dict[tuple[Any, ...], Any] = {}

    def build_part(value: Any) -> Any:
        if type(value) is not dict:
            raise _Invalid(f"expected {cls.__name__}")
        # Types with values: 1, 1.0 and True are equal keys, and only one is the right type.
        key = (*value, *map(type, value.values()), *value.values())
        part = known.get(key)
        if part is None:
            part = build(value)
            if len(known) >= _KNOWN_PARTS:
                known.clear()
            known[key] = part
        return part

    return build_part


_DECODERS: dict[str, tuple[type, _Check]] = {
    kind.KIND: (kind, _structure(kind)) for kind in typing.get_args(ControlMessage)
}


@typing.overload
def decode(packet: bytes, a: type[A], /) -> A | None: ...
@typing.overload
def decode(packet: bytes, a: type[A], b: type[B], /) -> A | B | None: ...
@typing.overload
def decode(packet: bytes, a: type[A], b: type[B], c: type[C], /) -> A | B | C | None: ...
@typing.overload
def decode(
    packet: bytes, a: type[A], b: type[B], c: type[C], d: type[D], /
) -> A | B | C | D | None: ...
@typing.overload
def decode(
    packet: bytes, a: type[A], b: type[B], c: type[C], d: type[D], e: type[E], /
) -> A | B | C | D | E | None: ...
def decode(packet: bytes, *kinds: type[Any]) -> Any:
    """``packet`` as one of ``kinds``, or None when it is not exactly one of them."""
    try:
        text = packet.decode()
        raw, end = _decode_json(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if end != len(text):  # what follows the object: nothing encode makes
        return None
    if type(raw) is not dict or type(kind := raw.pop("t", None)) is not str:
        return None
    entry = _DECODERS.get(kind)
    if entry is None or entry[0] not in kinds:
        return None
    try:
        return entry[1](raw)
    except (_Invalid, TypeError, ValueError):
        return None

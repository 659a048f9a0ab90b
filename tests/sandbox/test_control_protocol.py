"""The control channels' messages: every one round-trips, anything else is refused whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral.sandbox._control_protocol import (
    CgroupKnob,
    ControlMessage,
    Exec,
    Hello,
    HolderReady,
    InterpreterExited,
    InterpreterStarted,
    Interrupt,
    Interrupted,
    KillInterpreter,
    SignalCommand,
    Spawn,
    Spawned,
    SpawnRefused,
    StartFailed,
    StartInterpreter,
    StaticLimits,
    UseCgroups,
    ZygoteConfig,
    _plain_part,
    decode,
    encode,
)

STATIC = StaticLimits(work_bytes=1 << 20, pids=64, file_bytes=1 << 20, open_files=256)
KNOB = CgroupKnob(hierarchy="memory", name="memory.limit_in_bytes", value="268435456")
EXEC = Exec(argv=("/bin/true",), env={"A": "1"}, cwd="/home/user", memory_bytes=1, cpu_seconds=1)

EVERY_MESSAGE: list[ControlMessage] = [
    ZygoteConfig(preload=("numpy",), uids=(1, 2), cache_dir="/run/corral/cache"),
    ZygoteConfig(preload=(), uids=(1, 2), cache_dir="/c", data_dir="/mnt/data", prewarm=False),
    UseCgroups(hierarchies=("memory", "pids"), group_knobs=(KNOB,)),
    Spawn(id=1, static=STATIC),
    Spawn(id=2, static=STATIC, session_disk_bytes=1 << 20, cgroup=(KNOB,), cgroup_group="k-ab12"),
    Hello(pid=3, python="3.11.7", versions={"numpy": "2.0"}),
    StartFailed(error="no user namespaces"),
    Spawned(id=1, pid=42, uid=1879048193),
    SpawnRefused(id=1, error="every sandbox uid is in use"),
    StartInterpreter(),
    Interrupt(n=3),
    KillInterpreter(),
    EXEC,
    SignalCommand(pid=7, signal=15),
    HolderReady(),
    InterpreterStarted(),
    Interrupted(n=3),
    InterpreterExited(code=-9),
]


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(message: ControlMessage) -> None:
    assert decode(encode(message), type(message)) == message


def test_a_message_of_a_kind_not_expected_is_refused() -> None:
    assert decode(encode(HolderReady()), Spawned, SpawnRefused) is None
    assert decode(encode(Spawned(id=1, pid=2, uid=3)), Spawned, SpawnRefused) is not None


def _tamper(message: ControlMessage, **change: Any) -> bytes:
    raw = json.loads(encode(message))
    raw.update(change)
    return json.dumps(raw).encode()


@pytest.mark.parametrize(
    "packet",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"t": ["spawned"]}',
        b'{"t": "nothing"}',
        b'{"id": 1, "pid": 2, "uid": 3}',
        _tamper(Spawned(id=1, pid=2, uid=3), id=True),
        _tamper(Spawned(id=1, pid=2, uid=3), pid="2"),
        _tamper(Spawned(id=1, pid=2, uid=3), extra=1),
        b'{"t": "spawned", "id": 1, "pid": 2}',
        b"[" * 100_000,
        encode(Spawned(id=1, pid=2, uid=3)) + b"{}",
        encode(Spawned(id=1, pid=2, uid=3)) + b" ",
        b" " + encode(Spawned(id=1, pid=2, uid=3)),
    ],
)
def test_malformed_packets_are_refused(packet: bytes) -> None:
    assert decode(packet, Spawned) is None


@pytest.mark.parametrize(
    "change",
    [
        {"argv": []},
        {"argv": "/bin/true"},
        {"argv": ["/bin/tr\0ue"]},
        {"argv": [1]},
        {"argv": ["x"] * 4097},
        {"env": {"A=B": "1"}},
        {"env": {"": "1"}},
        {"env": {"A": 1}},
        {"env": ["A"]},
        {"cwd": 3},
        {"cwd": "/a\0b"},
        {"memory_bytes": 0},
        {"memory_bytes": True},
        {"cpu_seconds": -1},
        {"cpu_seconds": "10"},
    ],
)
def test_a_bad_command_is_refused_before_the_holder_sees_it(change: dict[str, Any]) -> None:
    assert decode(_tamper(EXEC, **change), Exec) is None


@pytest.mark.parametrize(
    "packet",
    [
        _tamper(SignalCommand(pid=7, signal=15), signal=19),  # SIGSTOP: not a command's
        _tamper(Spawn(id=1, static=STATIC), cgroup_group="../escape"),
        _tamper(Spawn(id=1, static=STATIC), cgroup_group="k-ÄB"),
        _tamper(
            Spawn(id=1, static=STATIC),
            cgroup=[{"hierarchy": "memory", "name": "../x", "value": "1"}],
        ),
        _tamper(
            Spawn(id=1, static=STATIC),
            static={**json.loads(encode(Spawn(id=1, static=STATIC)))["static"], "pids": 0},
        ),
        _tamper(UseCgroups(hierarchies=("memory",)), hierarchies=["memory", "memory"]),
    ],
)
def test_values_outside_their_bounds_are_refused(packet: bytes) -> None:
    assert decode(packet, SignalCommand, Spawn, UseCgroups) is None


def test_a_commands_arguments_are_encoded_afresh_and_never_kept() -> None:
    kept = _plain_part.cache_info().currsize
    command = Exec(argv=("sh", "-c", "echo secret"), env={}, cwd="/", memory_bytes=1, cpu_seconds=1)
    assert decode(encode(command), Exec) == command
    assert _plain_part.cache_info().currsize == kept


def test_a_part_decoded_before_is_handed_out_again_and_its_types_still_count() -> None:
    first = decode(encode(Spawn(id=1, static=STATIC, cgroup=(KNOB,))), Spawn)
    second = decode(encode(Spawn(id=2, static=STATIC, cgroup=(KNOB,))), Spawn)
    assert first is not None
    assert second is not None
    assert second.static is first.static
    assert second.cgroup[0] is first.cgroup[0]
    # True equals 1 and hashes alike: a remembered part must not let it pass as an int.
    ones = StaticLimits(work_bytes=1, pids=1, file_bytes=1, open_files=1)
    assert decode(encode(Spawn(id=3, static=ones)), Spawn) is not None
    as_bools = dict.fromkeys(
        json.loads(encode(ones_spawn := Spawn(id=4, static=ones)))["static"], True
    )
    assert decode(_tamper(ones_spawn, static=as_bools), Spawn) is None


def test_a_packet_is_the_standard_json_of_its_message() -> None:
    message = Hello(pid=3, python='3.11 \u00e9\n"x"', versions={"numpy": "2.0", "": "\u2603"})
    raw = json.loads(encode(message))
    assert encode(message) == json.dumps(raw, separators=(",", ":")).encode()

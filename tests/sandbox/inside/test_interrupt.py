"""The interpreter's SIGINT handling (``inside/_interrupt``), in this process: it raises in
armed code only, once per arming; one that came while the request was set up is raised when
the code starts; and a signal the code left blocked is spent while disarmed."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator

import pytest

from corral.sandbox.inside import _interrupt


@pytest.fixture(autouse=True)
def _restore_sigint() -> Iterator[None]:
    before = signal.getsignal(signal.SIGINT)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    _interrupt.install()
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    signal.signal(signal.SIGINT, before)


def _interrupt_me() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # handled before kill() returns to Python code


def test_disarmed_signals_are_ignored() -> None:
    _interrupt.install()
    _interrupt_me()  # an idle interpreter, or the runner's own work: nothing happens


def test_armed_code_gets_one_keyboard_interrupt() -> None:
    _interrupt.arm()
    with pytest.raises(KeyboardInterrupt):
        _interrupt_me()
    _interrupt_me()  # the second one finds it disarmed: the runner's cleanup is never broken


def test_an_interrupt_before_the_code_starts_is_raised_when_it_does() -> None:
    _interrupt.install()
    _interrupt.begin()
    _interrupt_me()  # the runner is setting up the run: kept, not raised there
    with pytest.raises(KeyboardInterrupt):
        _interrupt.arm()
    _interrupt.arm()  # and raised only once
    _interrupt.disarm()


def test_an_interrupt_while_the_next_request_waits_is_ignored() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        _interrupt.install()
        theirs.send(b"the next request")
        _interrupt_me()  # an earlier run's late signal: the engine stops only begun runs
        _interrupt.begin()
        _interrupt.arm()
        _interrupt.disarm()


def test_arming_undoes_what_the_code_did_to_the_signal() -> None:
    _interrupt.arm()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
    _interrupt_me()  # blocked: pending
    _interrupt.install()
    _interrupt.begin()
    _interrupt.arm()  # the pending one was the earlier run's: spent, not raised
    with pytest.raises(KeyboardInterrupt):
        _interrupt_me()

"""A flood of idle connections makes asyncio log every failed accept(): one line per interval
is kept, everything else passes untouched (a mock clock, since time is the subject)."""

from __future__ import annotations

import logging

import pytest

from corral.http import _server


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, None, None)


def test_accept_failures_are_logged_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("corral.http._server.time.monotonic", lambda: now[0])
    once = _server._AcceptFailuresOncePer()
    failure = _record("socket.accept() out of system resource")
    assert once.filter(failure)
    assert not once.filter(failure)
    assert once.filter(_record("Task exception was never retrieved"))
    now[0] += _server._ACCEPT_LOG_INTERVAL
    assert once.filter(failure)
    assert not once.filter(failure)

"""A build's log, whose lines the build's steps choose: bounded, and cut visibly. (Builds in
real sandboxes: test_templates.py.)"""

from __future__ import annotations

from corral.engine import BuildLog
from corral.engine._template_build import MAX_LOG_LINES


def test_a_build_log_keeps_at_most_its_lines_and_says_where_it_stops() -> None:
    seen: list[str] = []
    log = BuildLog(on_line=lambda line: seen.append(line.message))
    log.say("\n".join(["x" * 10_000] * (MAX_LOG_LINES + 50)), step=1)
    log.say("one more")
    assert len(log.lines) == MAX_LOG_LINES
    assert len(seen) == MAX_LOG_LINES
    assert log.lines[-1].message.startswith("(the log stops here")
    assert log.lines[-1].level == "error"
    assert max(len(line.message) for line in log.lines) <= 4096

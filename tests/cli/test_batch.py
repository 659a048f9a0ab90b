"""``corral batch`` as a user runs it: a few hundred lines, order, a bad line, a crash, resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral.cli._batch import finished_ids

CORRAL = str(Path(sys.executable).with_name("corral"))
LINES = 300
BAD_AT = 123

pytestmark = pytest.mark.isolation


def _write_input(path: Path) -> None:
    with path.open("w") as out:
        for i in range(LINES):
            if i == BAD_AT:
                out.write("{not json\n")
                continue
            item: dict[str, Any] = {"id": f"case-{i}", "code": "print(int(input()) ** 2)"}
            item["stdin"] = f"{i}\n"
            if i == 7:
                item = {"id": i, "code": "while True: pass", "timeout": 1}
            out.write(json.dumps(item) + "\n")


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check(records: list[dict[str, Any]]) -> None:
    assert len(records) == LINES
    for i, record in enumerate(records):
        if i == BAD_AT:
            assert record["outcome"] == "invalid_input"
            assert record["id"] is None
            assert f"line {BAD_AT + 1} is not JSON" in record["message"]
            assert record["line"] == BAD_AT + 1
        elif i == 7:
            assert (record["id"], record["outcome"]) == (7, "timeout")
        else:
            assert record["id"] == f"case-{i}"
            assert (record["outcome"], record["stdout"]) == ("ok", f"{i * i}\n"), record
        assert record["node"]
        assert "evidence" in record


def test_batch_in_order_with_a_bad_line(tmp_path: Path) -> None:
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write_input(source)
    done = subprocess.run(
        [CORRAL, "batch", str(source), "-o", str(target), "--concurrency", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    _check(_records(target))


def test_a_crash_loses_no_finished_line_and_resume_finishes(tmp_path: Path) -> None:
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write_input(source)
    process = subprocess.Popen(
        [CORRAL, "batch", str(source)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdout is not None
    kept = [process.stdout.readline() for _ in range(150)]
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    process.stdout.close()
    # What a crash mid-write leaves: the finished lines and a torn one.
    target.write_bytes(b"".join(kept) + b'{"id": "case-150", "sta')
    assert len(finished_ids(target)) == 150
    done = subprocess.run(
        [CORRAL, "batch", str(source), "-o", str(target), "--resume"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert target.read_bytes().startswith(b"".join(kept))
    _check(_records(target))


def test_resume_needs_an_output_and_a_missing_input_is_exit_2(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("")
    assert subprocess.run([CORRAL, "batch", str(source), "--resume"], check=False).returncode == 2
    missing = subprocess.run(
        [CORRAL, "batch", str(tmp_path / "nope.jsonl")], capture_output=True, check=False
    )
    assert missing.returncode == 2


def test_a_terminal_gets_a_progress_bar_with_rate_and_eta(tmp_path: Path) -> None:
    import os
    import pty

    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "code": "pass"}) + "\n" for i in range(20)))
    leader, follower = pty.openpty()
    with subprocess.Popen(
        [CORRAL, "batch", str(source), "-o", str(tmp_path / "out.jsonl")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env={**os.environ, "COLUMNS": "120", "TERM": "xterm"},
    ) as process:
        os.close(follower)
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the pty closes when the process exits
                break
            if not chunk:
                break
            drawn += chunk
        assert process.wait(timeout=120) == 0
    os.close(leader)
    text = drawn.decode(errors="replace")
    assert "20/20" in text
    assert "runs/s" in text
    assert "0:00:00" in text  # elapsed and remaining columns


def test_batch_lines_in_mixed_languages(tmp_path: Path) -> None:
    from corral.engine import discover_languages

    served = discover_languages().served
    if not {"cpp", "bash"} <= set(served):
        pytest.skip("needs g++ and bash on this host")
    cpp = "#include <iostream>\nint main() { int x; std::cin >> x; std::cout << x * 3 << '\\n'; }"
    lines: list[dict[str, Any]] = []
    for i in range(8):
        lines.append({"id": f"cpp-{i}", "code": cpp, "stdin": f"{i}\n", "language": "cpp"})
        lines.append({"id": f"sh-{i}", "code": "read x; echo $((x+1))", "stdin": f"{i}\n",
                      "language": "bash"})  # fmt: skip
        lines.append({"id": f"py-{i}", "code": "print(-int(input()))", "stdin": f"{i}\n"})
    lines.append({"id": "bad", "code": "x", "language": "cobol"})
    lines.append({"id": "broken", "code": "int main( {", "language": "cpp"})
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = subprocess.run(
        [CORRAL, "batch", str(source), "-o", str(target)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    records = {record["id"]: record for record in _records(target)}
    for i in range(8):
        assert (records[f"cpp-{i}"]["outcome"], records[f"cpp-{i}"]["stdout"]) == (
            "ok",
            f"{3 * i}\n",
        )
        assert records[f"cpp-{i}"]["compile"]["status"] == "Finished"
        assert records[f"sh-{i}"]["stdout"] == f"{i + 1}\n"
        assert records[f"py-{i}"]["stdout"] == f"{-i}\n"
    assert records["bad"]["outcome"] == "invalid_input"
    assert "language must be one of" in records["bad"]["message"]
    broken = records["broken"]
    assert broken["outcome"] == "python_error"
    assert broken["compile"]["return_code"] not in (None, 0)

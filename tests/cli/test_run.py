"""``corral run`` and ``corral doctor`` as a user types them (docs/design.md §3): real workers."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral.cli import main
from corral.sandbox._control_protocol import ZygoteConfig
from corral.sandbox.host import _launch
from corral.sandbox.host import _zygote as host_zygote

CORRAL = str(Path(sys.executable).with_name("corral"))
NORTHSTAR = Path(__file__).resolve().parents[2] / "examples" / "northstar.xlsx"

pytestmark = pytest.mark.isolation


def corral(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CORRAL, *args], input=stdin, capture_output=True, text=True, timeout=120, check=False
    )


def test_ok_prints_stdout_and_exits_0() -> None:
    done = corral("run", "-c", "print(6 * 7)")
    assert (done.returncode, done.stdout) == (0, "42\n")


def test_python_error_exits_1_with_the_traceback() -> None:
    done = corral("run", "-c", "1/0")
    assert done.returncode == 1
    assert "ZeroDivisionError: division by zero" in done.stderr


def test_invalid_input_exits_2() -> None:
    too_long = corral("run", "-c", "x = 1\n" * 5000)  # 30,000 characters > 20,000
    assert too_long.returncode == 2
    missing = corral("run", "/nonexistent/script.py")
    assert missing.returncode == 2
    assert "No such file" in missing.stderr
    after_the_file = corral("run", "missing.py", "-c", "1")  # "-c 1" are the file's arguments
    assert after_the_file.returncode == 2
    assert "No such file" in after_the_file.stderr


def test_timeout_exits_3_and_says_so() -> None:
    done = corral("run", "--timeout", "1", "-c", "while True: pass")
    assert done.returncode == 3
    assert "1 s time limit" in done.stderr


def test_json_is_the_full_result() -> None:
    done = corral("run", "--json", "-c", "print('hi')\n6 * 7")
    result = json.loads(done.stdout)
    assert done.returncode == 0
    assert (result["status"], result["outcome"], result["stdout"]) == ("SUCCESS", "ok", "hi\n")
    assert result["result"] == {"text/plain": "42"}
    assert set(result) >= {"display", "files", "omitted", "error", "elapsed_ms", "evidence"}
    assert result["evidence"]["limits"]["timeout"] == 30  # the one default (Limits.timeout)


def test_code_from_a_file_and_from_stdin(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text("print('from a file')\n")
    assert corral("run", str(script)).stdout == "from a file\n"
    assert corral("run", "-", stdin="print('from stdin')\n").stdout == "from stdin\n"


def test_source_mounts_the_northstar_workbook() -> None:
    code = (
        "import pandas as pd\n"
        "asset = next(iter(input_assets.values()))\n"
        "print(pd.read_excel(asset['original'])['Measured runtime (hours)'].mean())\n"
        "print(open(next(iter(input_files.values()))).read().splitlines()[1:4])"
    )
    done = corral("run", "--json", "--source", str(NORTHSTAR), "-c", code)
    result = json.loads(done.stdout)
    assert result["outcome"] == "ok", result["stderr"]
    lines = result["stdout"].splitlines()
    assert lines[0] == "8.25"
    assert "Prototype A,9" in lines[1]
    assert "Prototype B,7.5" in lines[1]
    (evidence,) = result["evidence"]["inputs"]
    assert len(evidence["sha256"]) == 64
    assert len(evidence["original_sha256"]) == 64


def test_an_unreadable_source_exits_2_with_the_reason(tmp_path: Path) -> None:
    corrupt = tmp_path / "book.xlsx"
    corrupt.write_bytes(b"not a zip")
    done = corral("run", "--source", str(corrupt), "-c", "1")
    assert done.returncode == 2
    assert "XLSX" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_a_binary_source_is_mounted_as_its_bytes(tmp_path: Path) -> None:
    binary = tmp_path / "blob.parquet"
    binary.write_bytes(b"PAR1\x00\x01\x02PAR1")
    done = corral(
        "run", "--json", "--source", str(binary), "-c",
        "(asset,) = input_assets.values()\n"
        "(path,) = input_files.values()\n"
        "(open(asset['original'], 'rb').read(), open(path).read(), asset['media_type'])",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)["result"]["text/plain"]
    assert result == "(b'PAR1\\x00\\x01\\x02PAR1', '', 'application/octet-stream')"


def test_doctor_json_reports_the_features() -> None:
    done = corral("doctor", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0
    assert report["ok"] is True
    names = {feature["name"] for feature in report["features"]}
    assert {"namespaces", "seccomp", "libseccomp", "pidfd"} <= names
    assert "ptrace" in report["seccomp_denied"]
    policy = report["seccomp_policy"]
    assert policy["default"] == "ENOSYS"
    allowed = {name for group in policy["allow"] for name in group["syscalls"]}
    assert {"read", "write", "mmap", "futex"} <= allowed
    assert all(group["why"] for group in policy["allow"] + policy["eperm"])
    assert {f["syscall"] for f in policy["filtered"]} == {"socket", "socketpair", "clone", "clone3"}


def test_out_dir_keeps_the_files_and_the_figures(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = corral(
        "run", "--out-dir", str(out), "-c",
        "import os\n"
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3])\n"
        "plt.savefig('fig.png')\n"
        "plt.show()\n"
        "os.makedirs('sub')\n"
        "open('sub/o.txt', 'w').write('kept')\n",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (out / "sub" / "o.txt").read_text() == "kept"
    assert (out / "fig.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "display-1.png").read_bytes().startswith(b"\x89PNG")
    assert f"[file: fig.png -> {out / 'fig.png'}" in done.stderr
    assert f"[display 1: image/png -> {out / 'display-1.png'}]" in done.stderr


def test_without_out_dir_the_files_are_named_with_a_hint() -> None:
    done = corral("run", "-c", "open('o.txt', 'w').write('x')")
    assert done.returncode == 0
    assert "[file: o.txt (1 bytes); --out-dir DIR saves it]" in done.stderr


def test_out_dir_never_leaves_its_folder(tmp_path: Path) -> None:
    # The worker is hostile: names it reports are written through the confined helpers only.
    from corral.cli._run import _save_outputs
    from corral.engine import ExecutionResult, FileInfo

    out = tmp_path / "out"
    (tmp_path / "elsewhere").mkdir()
    out.mkdir()
    (out / "link").symlink_to(tmp_path / "elsewhere")
    names = ["../escape.txt", "/abs.txt", "link/through.txt", "fine.txt"]
    result = ExecutionResult(
        outcome="ok",
        files=tuple(FileInfo(path=n, size=1, sha256="") for n in names),
        file_contents=dict.fromkeys(names, b"x"),
    )
    notes = _save_outputs(result, out)
    written = [n for n in notes if "not written" not in n]
    assert written == [f"[file: fine.txt -> {out / 'fine.txt'} (1 bytes)]"], notes
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["fine.txt"]


def test_output_is_printed_while_the_code_still_runs() -> None:
    # The code never ends on its own: its first line can only be seen if it is streamed.
    process = subprocess.Popen(
        [CORRAL, "run", "--timeout", "60", "-c", "print('first', flush=True)\nwhile True: pass"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "first\n"
        assert process.poll() is None  # still running: the line came live
    finally:
        process.kill()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def test_a_script_gets_its_arguments_and_its_file(tmp_path: Path) -> None:
    script = tmp_path / "report.py"
    script.write_text("import os, sys\nprint(sys.argv)\nprint(os.path.basename(__file__))\n")
    done = corral("run", str(script), "--year", "2024", "extra")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"[{str(script)!r}, '--year', '2024', 'extra']",
        "report.py",
    ]
    inline = corral("run", "-c", "import sys; print(sys.argv)", "a", "b")
    assert inline.stdout == "['-c', 'a', 'b']\n"
    piped = corral("run", "-", "x", stdin="import sys; print(sys.argv)")
    assert piped.stdout == "['-', 'x']\n"


def test_sys_exit_behaves_as_in_a_script() -> None:
    zero = corral("run", "-c", "import sys\nprint('bye')\nsys.exit(0)")
    assert (zero.returncode, zero.stdout, zero.stderr) == (0, "bye\n", "")
    three = corral("run", "--json", "-c", "import sys; sys.exit(3)")
    result = json.loads(three.stdout)
    assert three.returncode == 1  # python_error (docs/design.md §3); the status is in the result
    assert (result["outcome"], result["exit_code"], result["stderr"]) == ("python_error", 3, "")


def test_input_fails_in_one_clear_line() -> None:
    done = corral("run", "-c", "name = input('name? ')")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "EOFError: input() is not available: the program has no stdin"
    )
    assert "corral" not in done.stderr


def test_a_source_is_readable_under_its_own_name(tmp_path: Path) -> None:
    scores = tmp_path / "scores.csv"
    scores.write_text("name,score\nada,3\nbob,4\n")
    code = "import pandas as pd\nprint(pd.read_csv('scores.csv').score.sum())"
    done = corral("run", "--source", str(scores), "-c", code)
    assert (done.returncode, done.stdout) == (0, "7\n"), done.stderr


def test_run_adopts_the_zygote_it_started_ahead_of_the_engine(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In process, to watch the adoption: the zygote must be the one started before the
    # engine was imported, or its head start (and the 0.4 s of issue 10) is lost.
    adopted: list[bool] = []

    def watched(config: ZygoteConfig) -> Any:
        found = _launch.adopt(config)
        adopted.append(found is not None)
        return found

    monkeypatch.setattr(host_zygote, "adopt", watched)

    def run(code: str) -> object:
        try:
            main(["run", "-c", code])
        except SystemExit as exited:
            return exited.code
        return None

    for code in ("print(6 * 7)", "import numpy\nprint(numpy.int64(42))"):
        # A thread of its own: a module-scoped event loop of an earlier test may still run
        # in this one, and the CLI starts its own.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            assert pool.submit(run, code).result(timeout=120) == 0
        assert capsys.readouterr().out == "42\n"
    assert adopted == [True, True]  # the lean choice and the full one alike
    assert _launch._early == []


def test_a_reader_that_goes_away_ends_the_output_quietly() -> None:
    # `corral run ... | head -1`: two-byte characters, so the streamed 64,000 (the ceiling)
    # overflow the pipe's buffer and writes after the reader has gone fail with EPIPE.
    code = "for i in range(20000):\n    print('é' * 50)"
    process = subprocess.Popen(
        [CORRAL, "run", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    assert process.stdout.readline().decode() == "é" * 50 + "\n"
    process.stdout.close()
    _out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert b"Traceback" not in err
    assert b"BrokenPipeError" not in err


def test_the_run_is_a_full_sandbox() -> None:
    # What corral run leaves out for speed (pool, warm-up, IPython, a compiled policy) must
    # not be isolation: the worker sees itself as init of its own namespaces, unprivileged,
    # under the seccomp allowlist, with its rlimits and a masked /proc, and the host's
    # processes are invisible.
    code = (
        "import json, os, resource\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n"
        "status = {k: v.strip() for k, v in status.items()}\n"
        "print(json.dumps({'pid': os.getpid(), 'uid': os.getuid(), 'status': status,\n"
        "  'pids': [p for p in os.listdir('/proc') if p.isdigit()],\n"
        "  'nproc': resource.getrlimit(resource.RLIMIT_NPROC)[0],\n"
        "  'loadavg': open('/proc/loadavg').read(), 'cmdline': open('/proc/cmdline').read()}))"
    )
    done = corral("run", "--timeout", "20", "-c", code)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert (seen["pid"], seen["uid"], seen["pids"]) == (1, 1000, ["1"])
    status = seen["status"]
    assert (status["Seccomp"], status["NoNewPrivs"]) == ("2", "1")
    assert int(status["CapEff"], 16) == 0
    assert 0 < seen["nproc"] <= 1024
    assert (seen["loadavg"], seen["cmdline"]) == ("0.00 0.00 0.00 1/1 1\n", "")  # masked
    unshare = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000), ctypes.get_errno())"
    )
    assert corral("run", "-c", unshare).stdout == "-1 1\n"  # EPERM from the allowlist


def test_corral_run_a_cpp_file_by_its_suffix(tmp_path: Path) -> None:
    from corral.engine import discover_languages

    if "cpp" not in discover_languages().served:
        pytest.skip("no g++ here")
    source = tmp_path / "main.cpp"
    source.write_text('#include <cstdio>\nint main(int c, char **v) { printf("%s\\n", v[1]); }\n')
    done = subprocess.run(
        [CORRAL, "run", str(source), "hello"], capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "hello\n"), done.stderr
    source.write_text("int main() { return nope; }\n")
    failed = subprocess.run(
        [CORRAL, "run", "--language", "cpp", str(source)], capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert failed.returncode == 1
    assert "nope" in failed.stderr
    refused = subprocess.run(
        [CORRAL, "run", "--language", "cobol", "-c", "x"], capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "unknown language 'cobol'" in refused.stderr

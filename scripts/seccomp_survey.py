"""Find the system calls sandboxed code makes, to keep the seccomp allowlist honest.

    .venv/bin/python scripts/seccomp_survey.py trace           # run the corpus under strace
    strace -f -q -o suite.log .venv/bin/pytest tests/sandbox  # or trace anything else ...
    .venv/bin/python scripts/seccomp_survey.py parse suite.log # ... and read its log

Only processes that installed the seccomp filter (and their descendants) count: what the
zygote and a worker do while still setting up is not the policy's business. Prints each call
seen with its count and marks those the policy does not allow.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

CORPUS = [
    "print(6*7)",
    "import numpy as np; a = np.random.rand(300, 300); print((a @ a).sum())",
    "import pandas as pd; df = pd.DataFrame({'a': range(100)}); df.to_csv('x.csv');"
    " print(pd.read_csv('x.csv').a.sum())",
    "import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.savefig('p.png'); plt.show()",
    "import subprocess; print(subprocess.run(['ls', '-la', '/'], capture_output=True).stdout)",
    "import subprocess; subprocess.run('echo hi | cat > f.txt; sort f.txt', shell=True)",
    "import multiprocessing as mp\nwith mp.Pool(2) as p: print(p.map(abs, range(-5, 5)))",
    "import concurrent.futures as cf\n"
    "with cf.ProcessPoolExecutor(2) as ex: print(list(ex.map(abs, [-1, -2])))",
    "import threading; t = threading.Thread(target=print, args=(1,)); t.start(); t.join()",
    "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
    " c = socket.create_connection(s.getsockname()); a, _ = s.accept(); c.send(b'x');"
    " print(a.recv(1))",
    "import socket; socket.socketpair(); socket.getaddrinfo('localhost', 80)",
    "import asyncio; asyncio.run(asyncio.sleep(0.01))",
    "import sqlite3; c = sqlite3.connect('d.db'); c.execute('create table t(x)');"
    " c.execute('insert into t values (1)'); c.commit(); print(c.execute('select * from t')"
    ".fetchall())",
    "import os, shutil, tempfile; d = tempfile.mkdtemp(); open(d + '/a', 'w').write('x');"
    " os.symlink(d + '/a', d + '/b'); os.link(d + '/a', d + '/c'); os.chmod(d + '/a', 0o600);"
    " os.utime(d + '/a'); print(os.stat(d + '/b'), os.listdir(d)); shutil.rmtree(d)",
    "import mmap, os; f = open('m', 'wb+'); f.write(b'0' * 4096); f.flush();"
    " m = mmap.mmap(f.fileno(), 4096); m[0] = 1; m.close(); os.truncate('m', 0)",
    "import signal, os, time; signal.signal(signal.SIGALRM, lambda *a: None);"
    " signal.setitimer(signal.ITIMER_REAL, 0.01); time.sleep(0.05); os.kill(os.getpid(), 0)",
    "import resource, os; print(resource.getrlimit(resource.RLIMIT_NOFILE), os.cpu_count(),"
    " os.getloadavg(), os.uname(), os.getrandom(8), os.sched_getaffinity(0))",
    "import zipfile, tarfile, gzip, lzma, bz2, json, csv, io; gzip.compress(b'x');"
    " lzma.compress(b'x'); bz2.compress(b'x'); zipfile.ZipFile('z.zip', 'w').writestr('a', 'b')",
    "import time, datetime, locale; time.localtime(); datetime.datetime.now().astimezone();"
    " locale.setlocale(locale.LC_ALL, '')",
    "import os; r, w = os.pipe(); os.write(w, b'x'); print(os.read(r, 1));"
    " pid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)",
    "import select, selectors, os; s = selectors.DefaultSelector(); r, w = os.pipe();"
    " s.register(r, selectors.EVENT_READ); os.write(w, b'x'); print(s.select(0))",
    "import ctypes; ctypes.CDLL(None).getpid()",
    "import pandas as pd, numpy as np; df = pd.DataFrame(np.random.rand(1000, 4));"
    " df.to_parquet('x.pq') if False else df.describe(); df.plot()",
    "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import numpy; print(1)'])",
    "open('/inputs/missing')",
    "import os; os.system('uname -a; id; cat /proc/self/status >/dev/null; df -h; ps aux')",
    "1/0",
]

_LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()")
_SPAWN = re.compile(r"^(\d+)\s+(?:<\.\.\. )?(?:clone3?|fork|vfork)\b.*= (\d+)")
_EXIT = re.compile(r"^\d+\s+\+\+\+ (?:exited|killed)")
_SET_UP_ONLY = frozenset({"mount", "umount2", "pivot_root", "sethostname", "unshare", "capset"})
_LOCK = re.compile(r"prctl\(PR_SET_SECCOMP|seccomp\(SECCOMP_SET_MODE_FILTER")


def parse(log: Path) -> Counter[str]:
    """Count the calls of sandboxed processes in an ``strace -f`` log."""
    locked: set[str] = set()
    seen: Counter[str] = Counter()
    for line in log.read_text(errors="replace").splitlines():
        spawn = _SPAWN.match(line)
        if spawn:  # pids are reused: a new process is locked only if its parent was
            if spawn.group(1) in locked:
                locked.add(spawn.group(2))
            else:
                locked.discard(spawn.group(2))
        elif _EXIT.match(line):
            locked.discard(line.split()[0])
        match = _LINE.match(line)
        if not match:
            continue
        pid = match.group(1)
        if match.group(3) in _SET_UP_ONLY and "= -1 E" not in line:
            # A worker still setting up: its clone's return can come later in the log than
            # its first calls, so a reused pid may still look locked here.
            locked.discard(pid)
        elif pid in locked:
            if match.group(3):  # count a call once, at its start
                seen[match.group(3)] += 1
        elif _LOCK.search(line):  # a failed lock would have ended the worker
            locked.add(pid)
    return seen


async def _run_corpus() -> None:
    from corral.engine import Engine

    async with Engine(capacity=1, pool_size=1) as engine:
        for code in CORPUS * 2:  # the second round meets workers spawned while traced
            result = await engine.run(code)
            print(result.outcome, code[:60].replace("\n", " "), file=sys.stderr)
        session = await engine.open_session()
        for code in CORPUS[:8]:
            await session.run(code)
        await session.close()


def main(argv: list[str]) -> int:
    if argv[:1] == ["corpus"]:
        import anyio

        anyio.run(_run_corpus)
        return 0
    if argv[:1] == ["trace"]:
        with tempfile.TemporaryDirectory(dir=Path.cwd()) as scratch:
            log = Path(scratch) / "strace.log"
            strace = shutil.which("strace") or "strace"
            subprocess.run(
                [strace, "-f", "-q", "-o", str(log), sys.executable, __file__, "corpus"],
                check=True,
            )
            seen = parse(log)
    elif argv[:1] == ["parse"] and len(argv) == 2:
        seen = parse(Path(argv[1]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    from corral.sandbox import SECCOMP_POLICY

    allowed = SECCOMP_POLICY.allowed_names()
    for name, count in sorted(seen.items()):
        print(f"{'   ' if name in allowed else 'NEW'} {name:24} {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Run a command as on a host without user namespaces: in a user namespace of its own, with
every uid and gid mapped to itself (so root stays root for files) and no namespace allowed
below it (``user.max_user_namespaces`` is per namespace). corral's sandbox cannot be built
there, so the tests marked ``isolation`` skip and say why, and the rest must pass.

Usage: python3 scripts/without_userns.py COMMAND [ARG...]
"""

from __future__ import annotations

import ctypes
import os
import sys

_ALL_IDS = "0 0 4294967295\n"  # every id, mapped to itself
_CLONE_NEWUSER = 0x10000000  # os.unshare is Python 3.12's; CI's python3 may be older


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    ready_r, ready_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(ready_r)
        os.close(mapped_w)
        if ctypes.CDLL(None, use_errno=True).unshare(_CLONE_NEWUSER) != 0:
            os._exit(1)
        os.write(ready_w, b"u")
        if os.read(mapped_r, 1) != b"m":
            os._exit(1)
        with open("/proc/sys/user/max_user_namespaces", "w") as limit:
            limit.write("0")
        os.execvp(sys.argv[1], sys.argv[1:])  # noqa: S606 - the command as given, no shell
    os.close(ready_w)
    os.close(mapped_r)
    if os.read(ready_r, 1) != b"u":
        return 1
    # Only a process with CAP_SETUID in the parent namespace may map more than its own id.
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{child}/{name}", "w") as mapping:
            mapping.write(_ALL_IDS)
    os.write(mapped_w, b"m")
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())

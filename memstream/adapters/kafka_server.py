"""A real Apache Kafka broker on 127.0.0.1: single-node KRaft (broker and controller in one JVM),
its log on disk under a data dir of its own, so what it acknowledged survives kill -9.

The jars come from Maven Central through ``deploy/kafka/pom.xml`` (``make install``, or ``make
kafka``, copies them to ``.memstream/kafka/<version>/libs`` of the checkout, :data:`LIBS`, or
``MEMSTREAM_KAFKA_LIBS``); nothing is downloaded here. The broker runs as ``java -cp
'libs/*' kafka.Kafka server.properties`` after ``kafka.tools.StorageTool format`` once, the two
main classes the Apache Kafka tarball's ``kafka-server-start.sh`` and ``kafka-storage.sh`` run.

Like the Tansu broker (memstream/adapters/broker.py) it dies with the process that started it
(memstream/adapters/processes.py), and given a pidfile the next start stops one an earlier run left
behind (only a ``kafka.Kafka`` JVM still running this data dir's server.properties).
Measured figures: docs/research/issue-28-kafka.md.
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
import shutil
import subprocess
from pathlib import Path
from types import TracebackType

from memstream.adapters.broker import BrokerError, port_open, stop_leftover, wait_listening, write_pidfile
from memstream.adapters.processes import command_line, die_with_parent, running, stop_child

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.1.1"  # keep in step with kafka.version in deploy/kafka/pom.xml
# Where `make kafka` puts the jars: the checkout's root (an editable install), not the working
# directory, so `memstream up` finds them from anywhere.
LIBS = Path(__file__).resolve().parents[2] / ".memstream" / "kafka" / KAFKA_VERSION / "libs"
MAIN = "kafka.Kafka"
FORMATTED = "meta.properties"  # what kafka-storage format writes into the log dir

# Console output only: the caller redirects it to its log file, as it does Tansu's.
LOG4J2_PROPERTIES = """\
rootLogger.level=INFO
rootLogger.appenderRef.out.ref=out
appender.out.type=Console
appender.out.name=out
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka
logger.kafka.level=WARN
logger.apache.name=org.apache.kafka
logger.apache.level=WARN
"""


def render_properties(port: int, controller_port: int, log_dir: Path, node_id: int = 1) -> str:
    """server.properties of a one-node cluster on 127.0.0.1 whose internal topics (offsets,
    transactions, share groups) have one replica, as a single broker can hold."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "min.insync.replicas": "1",
        # A lone member need not wait 3 s for others to join before its first assignment.
        "group.initial.rebalance.delay.ms": "0",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def cluster_id(raw: bytes) -> str:
    """Kafka's text form of a 16-byte Uuid (URL-safe base64, no padding), as
    ``kafka-storage random-uuid`` prints it, without starting a JVM for it."""
    if len(raw) != 16:
        raise ValueError("a Kafka cluster id is 16 bytes")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def new_cluster_id() -> str:
    """A random cluster id; like Kafka's Uuid.randomUuid, none that starts with '-', which the
    command line would read as an option."""
    while (text := cluster_id(secrets.token_bytes(16))).startswith("-"):
        pass
    return text


def java_binary() -> Path:
    """JAVA_HOME's java, else the one on PATH; Kafka 4 needs Java 17 or newer."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java")
    if not found or not Path(found).is_file():
        raise BrokerError("no java for Apache Kafka: install Java 17+ or set JAVA_HOME")
    return Path(found)


def kafka_libs(libs: Path = LIBS) -> Path:
    if not (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
        raise BrokerError(
            f"no Apache Kafka {KAFKA_VERSION} jars in {libs}: run `make kafka` (Maven and Java 17+) "
            "in the memstream checkout, or set MEMSTREAM_KAFKA_LIBS"
        )
    return libs


def missing(libs: Path = LIBS) -> str | None:
    """Why Kafka cannot start here (no java, no jars), or None when it can."""
    try:
        java_binary()
        kafka_libs(libs)
    except BrokerError as exc:
        return str(exc)
    return None


def is_kafka(pid: int, properties: Path) -> bool:
    """Whether ``pid`` is a live Kafka broker running ``properties`` (a data dir's own)."""
    args = command_line(pid)
    return running(pid) and MAIN in args and str(properties) in args


class KafkaServer:
    """Apache Kafka on 127.0.0.1:``port`` (controller on ``controller_port``) with its log under
    ``data_dir``; use as a context manager or start()/stop(). A data dir formatted before is
    reused as it is: that is what makes the log outlive the process."""

    def __init__(
        self,
        port: int,
        controller_port: int,
        data_dir: Path,
        log_path: Path | None = None,
        libs: Path = LIBS,
        heap: str = "512m",
        pidfile: Path | None = None,
    ) -> None:
        self.port = port
        self.controller_port = controller_port
        # Absolute: the leftover check matches the path in a JVM's command line, whatever the cwd was.
        self.data_dir = data_dir.resolve()
        self.log_path = log_path
        self.libs = libs
        self.heap = heap
        self.pidfile = pidfile
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "log"

    @property
    def properties(self) -> Path:
        return self.data_dir / "server.properties"

    def _java(self, main: str, *args: str) -> list[str]:
        config = self.data_dir / "log4j2.properties"
        return [
            str(java_binary()),
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            f"-Dlog4j2.configurationFile={config}",
            "-cp",
            f"{kafka_libs(self.libs)}/*",
            main,
            *args,
        ]

    def _configure(self) -> Path:
        """Write server.properties and the logging config (ports may differ from the last run)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        self.properties.write_text(render_properties(self.port, self.controller_port, self.log_dir))
        return self.properties

    def format(self, properties: Path) -> None:
        """Format the log dir as a new one-voter cluster, once: a formatted dir keeps its id."""
        if (self.log_dir / FORMATTED).is_file():
            return
        command = self._java(
            "kafka.tools.StorageTool", "format", "-t", new_cluster_id(), "-c", str(properties), "--standalone"
        )
        done = subprocess.run(command, capture_output=True, check=False)
        if done.returncode != 0:
            tail = done.stdout[-2000:].decode(errors="replace")
            raise BrokerError(f"kafka-storage format exited with code {done.returncode}: {tail}")

    def start(self, timeout: float = 60.0) -> KafkaServer:
        self._stop_leftover()
        for port in (self.port, self.controller_port):
            if port_open(port):
                raise BrokerError(f"port {port} is already in use on 127.0.0.1")
        properties = self._configure()
        self.format(properties)
        out = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            self._java(MAIN, str(properties)),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C in a terminal reaches the starter, which stops it in order
            preexec_fn=die_with_parent(),
        )
        try:
            self._wait_ready(timeout)
            if self.pidfile:
                write_pidfile(self.pidfile, self.proc.pid, self.port)
        except BaseException:  # also SIGTERM/Ctrl-C while waiting: `with` would not call __exit__
            self.stop()
            raise
        return self

    def _stop_leftover(self) -> None:
        """A Kafka an earlier run on this data dir left behind (its starter killed where the
        kernel could not stop it) holds the log dir's lock: stop it, flushing its log."""
        if not self.pidfile:
            return
        left = stop_leftover(self.pidfile, 30.0, lambda pid, _port: is_kafka(pid, self.properties))
        if left:
            log.warning("stopped Kafka pid %d, left behind on port %d by an earlier run", *left)

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        wait_listening(self.proc, "Kafka", self.port, timeout, self.log_path, poll_s=0.1)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a controlled shutdown that flushes the log), SIGKILL after ``timeout``."""
        if self.proc and stop_child(self.proc, timeout):
            log.warning("Kafka pid %d ignored SIGTERM for %.0fs: killed it", self.proc.pid, timeout)
        if self.pidfile:
            self.pidfile.unlink(missing_ok=True)
        self.proc = None

    def __enter__(self) -> KafkaServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

"""Which broker ``memstream up`` (and ``memstream broker``) starts when no bootstrap servers are
set: ``MEMSTREAM_BROKER``.

* ``kafka``: Apache Kafka (memstream/adapters/kafka_server.py), its log under
  ``MEMSTREAM_DATA_DIR/kafka-data``: what the gateway acknowledged survives a stop, kill -9 and a
  restart, which goes on from the committed offsets. Needs Java 17+ and the jars of ``make install``.
* ``tansu``: Tansu (memstream/adapters/broker.py), log in memory: no Java, starts in a fraction of
  a second; a stop drains what was accepted (memstream/apps/drain.py), kill -9 loses it.
* ``auto`` (the default): Kafka where it can start, else Tansu, so a checkout without Java still runs.
"""

from __future__ import annotations

from typing import Literal

from memstream.adapters.broker import Broker, free_port
from memstream.adapters.kafka_server import LIBS, KafkaServer, missing
from memstream.adapters.settings import Settings

BrokerKind = Literal["kafka", "tansu"]
KAFKA_DIR = "kafka-data"  # under the data dir: .memstream/kafka holds the jars of `make kafka`


def broker_kind(settings: Settings) -> BrokerKind:
    """The broker ``settings`` asks for, ``auto`` resolved (Kafka if Java and its jars are here)."""
    if settings.kafka.broker != "auto":
        return settings.kafka.broker
    return "kafka" if missing(settings.kafka.kafka_libs or LIBS) is None else "tansu"


def embedded_broker(settings: Settings, port: int | None = None) -> Broker | KafkaServer:
    """The embedded broker on 127.0.0.1:``port`` (default ``embedded_broker_port``), not yet
    started; its pidfile and log in the data dir. Kafka's controller takes a free port on each
    start: only the broker itself connects to it, and the properties are written anew each time."""
    data = settings.storage.data_dir
    port = port or settings.kafka.embedded_broker_port
    if broker_kind(settings) == "tansu":
        return Broker(port, data / "broker.log", data / "broker.pid")
    return KafkaServer(
        port,
        free_port(),
        data / KAFKA_DIR,
        data / "kafka.log",
        settings.kafka.kafka_libs or LIBS,
        pidfile=data / "kafka.pid",
    )


def describe(settings: Settings) -> str:
    """The embedded broker's name and where it keeps its log, for the log line that starts it."""
    if broker_kind(settings) == "tansu":
        return "Tansu (memory storage: data is gone when it stops)"
    return f"Apache Kafka (log in {settings.storage.data_dir / KAFKA_DIR})"

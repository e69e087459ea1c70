"""What memstream takes from faust-streaming, in one place: its settings, a lean sensor, the
rebalance signals and batched streams, typed (faust's own annotations lack what is used here)."""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from typing import Any

import faust
from faust.sensors import Monitor
from faust.types import TP, EventT, Message, StreamT
from mode.types.signals import BaseSignalT

from memstream.adapters.kafka import by_key, ssl_context
from memstream.adapters.settings import Settings
from memstream.streams.table_store import store_url, worker_dir

MAX_POLL_RECORDS = 100  # records per consumer fetch (see faust_settings)


def faust_credentials(settings: Settings) -> faust.types.auth.CredentialsT | None:
    """The brokers' TLS / SASL settings as faust credentials (None for PLAINTEXT)."""
    protocol = settings.kafka.kafka_security_protocol
    context = ssl_context(settings) if protocol in ("SSL", "SASL_SSL") else None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        assert settings.kafka.kafka_sasl_password is not None  # the settings refuse SASL without one
        return faust.SASLCredentials(
            username=settings.kafka.kafka_sasl_username,
            password=settings.kafka.kafka_sasl_password.get_secret_value(),
            mechanism=settings.kafka.kafka_sasl_mechanism,
            ssl_context=context,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def faust_settings(settings: Settings) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "broker": f"kafka://{settings.kafka.brokers}",
        "broker_credentials": faust_credentials(settings),
        # memory: table state is rebuilt from its changelog topic; rocksdb: kept on disk in the
        # worker's own directory, read from the changelog only past what it holds (streams/table_store.py)
        "store": store_url(settings.storage.table_store),
        # faust's own directory, under the data dir (not the working directory: a pod's root
        # file system is read-only); one per worker with RocksDB, which locks its databases
        "datadir": str(
            worker_dir(settings.storage.data_dir, settings.worker.worker_index)
            if settings.storage.table_store == "rocksdb"
            else settings.storage.data_dir / "faust"
        ),
        "table_standby_replicas": settings.storage.table_standby_replicas,
        "topic_partitions": settings.kafka.topic_partitions,
        "topic_replication_factor": settings.kafka.topic_replication_factor,
        "web_enabled": settings.worker.metrics_port > 0,
        "web_port": settings.worker.metrics_port,
        "web_bind": settings.worker.metrics_host,
        "web_host": settings.worker.metrics_host,
        # faust's own pages would serve table contents (/table: open windows, with turn text) and the
        # app's topology beside /metrics: the status port serves only streams/pages.py's.
        "web_router_enabled": False,
        "web_tables_enabled": False,
        "web_graph_enabled": False,
        "web_stats_enabled": False,
        "web_metrics_enabled": False,
        "producer_acks": -1,
        "producer_partitioner": by_key,  # partition_for, stated (memstream.adapters.kafka.by_key)
        "consumer_auto_offset_reset": "earliest",
        "broker_commit_interval": settings.worker.commit_interval_s,
        "topic_allow_declare": True,
        # faust stops fetching a partition once its agent's buffer is 80 % full (mode's
        # FlowControlQueue), but what was fetched is still delivered, and a delivery into a full
        # buffer blocks the delivery of every record, to every agent. With a long backlog that
        # stalled a worker with every role: consolidation waits for its own updates to be indexed
        # (streams/read_your_writes.py), the index agent never got them, one 30 s timeout per
        # request (bench/soak.py, 100,000 turns). At most MAX_POLL_RECORDS per fetch, at most one
        # fetch per partition after the pause: the remaining 20 % of the buffer must hold them.
        "broker_max_poll_records": MAX_POLL_RECORDS,
        "stream_buffer_maxsize": max(4096, 5 * settings.kafka.topic_partitions * MAX_POLL_RECORDS),
    }
    if settings.worker.group_session_timeout_s:
        conf.update(
            broker_session_timeout=settings.worker.group_session_timeout_s,
            broker_heartbeat_interval=settings.worker.group_session_timeout_s / 10,  # Kafka's ratio
        )
    if settings.kafka.tansu_quirks:
        # Tansu (test/dev broker) reports wrong end offsets for multi-record batches and
        # makes group joins wait half the rebalance timeout (docs/configuration.md, "Tansu, the development
        # broker").
        conf.update(
            producer_max_batch_size=1,
            broker_session_timeout=6,
            broker_rebalance_timeout=6,
            broker_heartbeat_interval=1,
        )
    return conf


class ReadOffsets(Monitor):
    """faust's default sensor keeps per-event statistics (timings, counts by stream and task)
    that nothing here reads, at a cost per event; this one keeps only the read offsets that
    the lag gauge needs (``tp_read_offsets``)."""

    def on_message_in(self, tp: TP, offset: int, message: Message) -> None:
        self.tp_read_offsets[tp] = offset

    def on_stream_event_in(
        self, tp: TP, offset: int, stream: StreamT, event: EventT
    ) -> dict[str, Any] | None:
        return None

    def on_stream_event_out(
        self, tp: TP, offset: int, stream: StreamT, event: EventT, state: dict[str, Any] | None = None
    ) -> None:
        return None

    def on_message_out(self, tp: TP, offset: int, message: Message) -> None:
        return None


def on_rebalance(signal: BaseSignalT[Any], handle: Callable[[set[TP]], None]) -> None:
    """Calls ``handle`` with the partitions of faust's ``on_partitions_assigned`` or
    ``on_partitions_revoked`` signal. The signal sends them after its sender, positionally;
    mode's receiver type admits no parameter for them, hence ``args``."""

    def receiver(sender: Any, /, *args: Any, signal: BaseSignalT[Any], **kwargs: Any) -> None:
        handle(args[0])

    signal.connect(receiver)


def batches(stream: StreamT, size: int, within: float) -> AsyncIterable[Sequence[EventT]]:
    """Batches of up to ``size`` events, each with its partition and offset (for dead letters).
    An agent's stream is a ``faust.Stream``, whose ``take_events`` faust's ``StreamT`` lacks."""
    assert isinstance(stream, faust.Stream)
    return stream.take_events(size, within=within)


def manual_acks(stream: StreamT) -> tuple[AsyncIterable[EventT], Callable[[EventT], Awaitable[bool]]]:
    """The stream's events, acknowledged only when the returned function is called with them (not
    as the next one is read): for a stage that finishes records out of order (streams/key_ordered.py)."""
    assert isinstance(stream, faust.Stream)  # for ``noack`` and ``events``, which ``StreamT`` lacks
    noack = stream.noack()
    assert isinstance(noack, faust.Stream)
    return noack.events(), noack.ack

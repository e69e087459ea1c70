"""The stream topology, declared in one place. It reads like the diagram in DESIGN.md:

    [turns] --ingest--> units collection (Qdrant)
                   \\--> [consolidation]   recurrence fired (RecMem)
                   \\--> [windows]         session/day/week/month closed (TiMem)
                   \\--> [dead-letter]     invalid input, with the reason
    window-state table (per user, changelogged) <-- ingest, idle timer

Consolidation consumers (``consumers/``) read [consolidation] and [windows] and write
[memory.updates]; they join this topology as they are built.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import faust
import orjson
from faust.sensors import Monitor
from faust.types import TP, EventT, Message, StreamT
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from memstream import metrics
from memstream.kafka import partition_for
from memstream.settings import Settings
from memstream.windows import UserWindows, close_idle
from schemas.events import ConsolidationRequest, DeadLetter, Record, WindowClosed
from schemas.topics import CONSOLIDATION, DEAD_LETTER, TURNS, WINDOWS
from streams.ingest import Incoming, IngestProcessor


def faust_settings(settings: Settings) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "broker": f"kafka://{settings.brokers}",
        "store": "memory://",  # table state is rebuilt from its changelog topic
        "topic_partitions": settings.topic_partitions,
        "web_enabled": settings.metrics_port > 0,
        "web_port": settings.metrics_port,
        "web_bind": settings.metrics_host,
        "web_host": settings.metrics_host,
        "producer_acks": -1,
        "consumer_auto_offset_reset": "earliest",
        "broker_commit_interval": settings.commit_interval_s,
        "topic_allow_declare": True,
    }
    if settings.tansu_quirks:
        # Tansu (test/dev broker) reports wrong end offsets for multi-record batches and
        # makes group joins wait half the rebalance timeout (DESIGN.md).
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


def build_app(settings: Settings, processor: IngestProcessor) -> faust.App:
    app = faust.App(settings.app_id, monitor=ReadOffsets(), **faust_settings(settings))

    turns_name = settings.topic(TURNS.name)
    turns = app.topic(
        turns_name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=settings.topic_partitions,
    )
    # Per-user open windows. use_partitioner routes changelog records by key like the turns
    # topic, so state stays co-partitioned with its user even when updated from the timer.
    window_state = app.Table(
        "window-state",
        default=None,
        partitions=settings.topic_partitions,
        key_type=bytes,  # raw tenant/user bytes: the same key, so the same partition, as the turns
        value_type=None,  # JSON of memstream.windows.UserWindows
        use_partitioner=True,
    )

    async def publish(
        consolidation: Sequence[ConsolidationRequest] = (),
        windows: Sequence[WindowClosed] = (),
        dead_letters: Sequence[DeadLetter] = (),
    ) -> None:
        """Send every record, then wait until all are delivered (acks=all): input offsets are
        acked only after that. Straight to the producer: the records are bytes already, and
        faust's channel machinery costs more per record than the send itself."""
        for w in windows:  # counted here: the agent and the idle timer both close windows
            metrics.WINDOWS_CLOSED.labels(w.level.value, w.reason.value).inc()
        outputs: list[tuple[str, Sequence[Record]]] = [
            (CONSOLIDATION.name, consolidation),
            (WINDOWS.name, windows),
            (DEAD_LETTER.name, dead_letters),
        ]
        pending = [
            await app.producer.send(settings.topic(name), _key(r).encode(), r.to_bytes(), None, None, None)
            for name, records in outputs
            for r in records
        ]
        await asyncio.gather(*pending)

    @app.agent(turns)
    async def ingest(stream: faust.StreamT) -> None:
        # take_events (not take) keeps each record's partition and offset for dead letters.
        batches = stream.take_events(settings.batch_size, within=settings.batch_within_s)  # type: ignore[attr-defined]
        async for events in batches:
            result = await processor.process([_incoming(e) for e in events], window_state)
            await publish(result.consolidation, result.windows, result.dead_letters)

    def owned() -> set[int]:
        """Partitions of the turns topic this worker processes now."""
        return {tp.partition for tp in app.consumer.assignment() if tp.topic == turns_name}

    def release_stores(sender: Any, revoked: set[TP], **kwargs: Any) -> None:
        # Sent after faust has waited for in-flight batches; the partitions' next owner opens
        # their stores.
        gone = [tp.partition for tp in revoked if tp.topic == turns_name]
        processor.shards.release(gone)
        for partition in gone:
            metrics.CONSUMER_LAG.remove(turns_name, str(partition))

    # mode's annotation of connect() is a union of callables that mypy cannot match a def against.
    app.on_partitions_revoked.connect(release_stores)  # type: ignore[arg-type]

    @app.timer(settings.idle_check_interval_s)
    async def close_idle_windows() -> None:
        closed = []
        now = processor.clock()
        mine = owned()
        for key, raw in list(window_state.items()):
            # The in-memory table also holds standby copies of other workers' users: skip them.
            if not raw or partition_for(key, settings.topic_partitions) not in mine:
                continue
            state, done = close_idle(UserWindows.from_json(raw), now=now, idle_close=processor.idle_close)
            if done:
                window_state[key] = state.to_json()
                closed.extend(done)
        await publish(windows=closed)

    @app.timer(5.0)
    async def report_lag() -> None:
        read = app.monitor.tp_read_offsets or {}
        for partition in owned():
            tp = TP(turns_name, partition)
            high = app.consumer.highwater(tp)
            done = read.get(tp, -1) + 1
            if high is not None:
                metrics.CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(max(high - done, 0))

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        return web.bytes(generate_latest(), content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        return web.json({"ok": True})

    @app.page("/status")
    async def status_page(web: Any, request: Any) -> Any:
        lag = {
            f"{s.labels['topic']}/{s.labels['partition']}": s.value
            for m in metrics.CONSUMER_LAG.collect()
            for s in m.samples
        }
        body = {**processor.status(), "partitions": sorted(owned()), "lag": lag}
        return web.bytes(orjson.dumps(body), content_type="application/json")

    return app


def _key(record: Record) -> str:
    return getattr(record, "key", None) or ""


def _incoming(event: EventT) -> Incoming:
    msg = event.message
    key = msg.key.decode("utf-8", "replace") if isinstance(msg.key, bytes) else None
    return Incoming(value=event.value, key=key, topic=msg.topic, partition=msg.partition, offset=msg.offset)

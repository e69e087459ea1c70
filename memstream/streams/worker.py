"""One worker process's parts, in one object: its faust app, the stores of the partitions it holds
(shards), the clock, the embedder, its tables, what its handlers share (the writing lock, the
read-your-writes barrier, the publisher), its partitions and timers, and its pages. The topology
(streams/app.py), the status pages (streams/pages.py) and the handlers (streams/handlers.py) take
what they need from it; the ingest processor only processes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import faust
from faust.transport.drivers.aiokafka import Producer as AIOKafkaProducerService
from faust.types import TP, ProducerT

from memstream.adapters import metrics
from memstream.adapters.kafka import track_topics
from memstream.adapters.settings import ConsolidationSettings, Settings
from memstream.adapters.store.shards import Shards
from memstream.consumers import Consolidation
from memstream.core.embedder import Embedder
from memstream.core.forgetting import Forgotten
from memstream.core.store import VectorStore
from memstream.core.units import UNITS
from memstream.embedded_store.internal import serve_internal
from memstream.embedded_store.read_leases import ReadLeases
from memstream.schemas.topics import MEMORY_UPDATES, TopicSpec
from memstream.streams.consumer import RewindingConsumer, TansuConsumer
from memstream.streams.faust_adapter import ReadOffsets, faust_settings, on_rebalance
from memstream.streams.handlers import (
    Clock,
    Consolidating,
    Gone,
    Indexing,
    Publish,
    Requests,
    Retries,
    Sleep,
    StoreOf,
    Summaries,
)
from memstream.streams.ingest import Incoming, IngestProcessor
from memstream.streams.pages import Readiness, add_pages
from memstream.streams.partitions import Partitions
from memstream.streams.publish import Publisher
from memstream.streams.read_your_writes import OwnWrites, ReadYourWrites, Takeover
from memstream.streams.table_store import use_changelog_recovery

log = logging.getLogger("memstream")
# How long a rebalance waits for the recalls still reading a revoked partition's store (a recall takes
# tens of milliseconds; the consumer group's rebalance timeout is far longer).
RELEASE_WAIT_S = 10.0
# The batch size of the pipeline records' producer on Tansu (_records_producer): faust's default.
RECORDS_MAX_BATCH_BYTES = 16384


@dataclass(frozen=True)
class Tables:
    """A worker's tables, each keyed by the raw tenant/user bytes."""

    window_state: faust.types.TableT  # open windows (memstream.core.windows.UserWindows)
    # Users deleted through the gateway, with the times that tell their records still on the way
    # from new ones (memstream/core/forgetting.py); kept for good.
    forgotten: faust.types.TableT
    tree_state: faust.types.TableT | None  # with the consolidate role: memstream.core.tree.TreeState

    @property
    def per_user(self) -> list[faust.types.TableT]:
        """Per-user state a DELETE must clear."""
        return [t for t in (self.window_state, self.tree_state) if t is not None]


@dataclass(frozen=True)
class Consolidators:
    """The consolidate role's handlers; ``request``, ``window`` and ``deferred`` are what its
    agents run on each record of their topic."""

    requests: Requests
    summaries: Summaries
    retries: Retries
    publish: Publish

    async def request(self, r: Incoming) -> None:
        await self.publish(await self.requests.request(r))

    async def window(self, r: Incoming) -> None:
        await self.summaries.window(r)  # publishes what it decided itself, before saving its state

    async def deferred(self, r: Incoming) -> None:
        await self.publish(await self.retries.deferred(r))


@dataclass(frozen=True)
class Handlers:
    """Builds the consolidate and index roles' handlers from what they share, for a worker
    (``Worker.handlers``) and for the in-process pipeline (streams/offline.py) alike: the two
    pipelines run handlers made in this one place."""

    consolidation: Consolidation
    config: ConsolidationSettings
    store_of: StoreOf
    barrier: ReadYourWrites
    gone: Gone
    interrupted: Callable[[], bool]
    clock: Clock
    publish: Publish
    sleep: Sleep = asyncio.sleep

    def consolidators(self, tree_state: MutableMapping[bytes, Any]) -> Consolidators:
        step = Consolidating(
            self.store_of,
            self.barrier,
            self.gone,
            self.interrupted,
            self.clock,
            self.config.defer_retry_s,
            self.sleep,
        )
        tree = self.consolidation.tree
        return Consolidators(
            Requests(step, self.consolidation.recurrence.handle),
            Summaries(step, tree.handle, tree_state, self.publish, self.config.durative_delay_s),
            Retries(step, tree.durative),
            self.publish,
        )

    def indexing(self) -> Indexing:
        return Indexing(self.consolidation.indexer.apply, self.store_of, self.gone, self.clock, self.sleep)


class Worker:
    """One worker process. Built before the app starts: its partitions, tables and timers are read and
    run once faust has started it."""

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        shards: Shards,
        processor: IngestProcessor,
        consolidation: Consolidation,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.roles = frozenset(settings.worker.roles)
        self.embedder = embedder
        self.shards = shards
        self.processor = processor
        self.clock = clock
        self.idle_close = timedelta(seconds=settings.windows.idle_close_s)
        self.app = _faust_app(settings)
        self.tables = Tables(
            self._user_table("window-state"),
            self._user_table("forgotten"),
            self._user_table("tree-state") if "consolidate" in self.roles else None,
        )
        # An ingest batch, the erase of a deleted user and the idle timer never interleave: a batch
        # either sees the user forgotten, or ran before the erase; window states read stay current.
        self.writing = asyncio.Lock()
        self.barrier = ReadYourWrites(
            Takeover(settings, settings.kafka.topic(MEMORY_UPDATES.name)), OwnWrites()
        )
        self.records = _records_producer(self.app, settings)
        self.publish = Publisher(self._send, self.barrier.own)
        self.handlers = Handlers(
            consolidation,
            settings.consolidation,
            self.store_of,
            self.barrier,
            self.gone,
            self.interrupted,
            clock,
            self.publish,
        )
        self.partitions = Partitions(self.app, settings.kafka, clock, self.idle_close.total_seconds())
        self.readiness = Readiness()
        self.leases = ReadLeases(settings.worker.worker_recall_concurrency)
        self._wire()

    # ---- what the handlers take -----------------------------------------------------------------
    def store_of(self, partition: int) -> VectorStore:
        return self.shards.get(partition)

    def gone(self, key: bytes | None) -> Forgotten | None:
        return Forgotten.from_json(self.tables.forgotten.get(key or b""))

    def interrupted(self) -> bool:
        # The flow stops while the worker rebalances or stops: no index agent reads then.
        return bool(self.app.should_stop) or not self.app.flow_control.is_active()

    def topic(self, spec: TopicSpec) -> faust.TopicT:
        return self.app.topic(
            self.settings.kafka.topic(spec.name),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=self.settings.kafka.topic_partitions,
        )

    def status(self, partitions: Iterable[int]) -> dict[str, Any]:
        """What the pipeline has done since this process started, and what the stores of the
        ``partitions`` it holds hold (opened if need be: after a rebalance a partition's store
        is otherwise opened with its next record)."""
        stores = {id(s): s for s in (self.shards.get(p) for p in partitions)}
        return {
            "config": {
                "embedder": self.embedder.name,
                "theta_sim": self.processor.theta_sim,
                "theta_count": self.settings.consolidation.theta_count,
            },
            "units_in_store": sum(s.count(UNITS) for s in stores.values()),
            **metrics.snapshot(),
        }

    # ---- wiring ---------------------------------------------------------------------------------
    def _user_table(self, name: str) -> faust.types.TableT:
        # use_partitioner routes changelog records by key like the turns topic, so state stays
        # co-partitioned with its user even when a timer updates it.
        return self.app.Table(
            name,
            default=None,
            partitions=self.settings.kafka.topic_partitions,
            key_type=bytes,
            value_type=None,  # JSON
            use_partitioner=True,
        )

    def _send(self, name: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> Any:
        # Memory updates keep the app's producer: the takeover and the gateway's resume read their
        # topic's end offsets, which Tansu gets right only for one-record batches (_records_producer).
        producer = self.app.producer if name == MEMORY_UPDATES.name else self.records
        return producer.send(self.settings.kafka.topic(name), key, value, None, None, headers or None)

    def _wire(self) -> None:
        """Rebalance hooks, timers and pages."""
        app = self.app
        on_rebalance(app.on_partitions_assigned, self.readiness.assigned)
        on_rebalance(app.on_partitions_revoked, self._release_stores)
        on_rebalance(app.on_partitions_assigned, self._take_stores)

        @app.task
        async def know_changelogs() -> None:
            # A use_partitioner table picks its changelog record's partition from the producer's cached
            # metadata, without waiting for it (faust's key_partition). A producer that does not track a
            # changelog (memstream.adapters.kafka.track_topics) loses it from its metadata, and the write
            # fails (TypeError, retried for ever; seen in tests/test_routing.py on Kafka). Track them all.
            if isinstance(app.producer, AIOKafkaProducerService):
                changelogs = [table.changelog_topic.get_topic_name() for table in app.tables.values()]
                await track_topics(app.producer._ensure_producer(), changelogs)

        @app.timer(5.0)
        async def report_lag() -> None:
            self.partitions.update_lag()

        held = self.partitions.held
        internal_port = serve_internal(app, self.settings, held, self.store_of, self.embedder, self.leases)
        add_pages(app, self.readiness, self.status, held, self.partitions.update_lag, internal_port)

    def _take_stores(self, assigned: set[TP]) -> None:
        self.barrier.takeover.assigned(self.partitions.take(assigned))

    def _release_stores(self, revoked: set[TP]) -> None:
        # Sent after faust has waited for in-flight batches; the partitions' next owner opens
        # their stores. Recalls running in threads on them finish first (no new one starts: they
        # are no longer held, and the loop is here).
        gone = self.partitions.revoke(revoked)
        if not self.leases.wait_idle(gone, RELEASE_WAIT_S):
            log.warning("closing the stores of partitions %s under a recall still running", gone)
        self.shards.release(gone)


def _records_producer(app: faust.App, settings: Settings) -> ProducerT:
    """The producer of the pipeline's own records (windows, requests, dead letters, deferred work).
    Against Tansu, the app's producer sends one record per batch, so that the tables' changelogs keep
    end offsets faust's recovery can trust (faust_adapter.py); but a producer holds one unsent batch
    per partition and sends one request at a time, so a batch's records then went out one round trip
    each: a fifth of a worker's CPU at ingest (bench/RESULTS.md). These records are batched by a
    producer of their own: nothing reads their topics' end offsets (kafka.consumed reads the log's end
    from fetches). Elsewhere the app's producer batches already."""
    if not settings.kafka.tansu_quirks:
        return app.producer
    producer = app.transport.create_producer(loop=app.loop, beacon=app.beacon)
    producer.max_batch_size = RECORDS_MAX_BATCH_BYTES
    app.add_dependency(producer)  # started and stopped with the app
    return producer


def _faust_app(settings: Settings) -> faust.App:
    app = faust.App(settings.kafka.app_id, monitor=ReadOffsets(), **faust_settings(settings))
    # faust takes the consumer class from its transport (streams/consumer.py: no skipped records;
    # short fetch waits against Tansu). faust types it a ClassVar, but set on this app's transport
    # instance it leaves other apps in the process (tests) alone.
    app.transport.Consumer = TansuConsumer if settings.kafka.tansu_quirks else RewindingConsumer  # type: ignore[misc]
    use_changelog_recovery(app)  # a database ahead of its changelog is emptied, not fatal
    return app

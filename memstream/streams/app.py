r"""The stream topology, declared in one place: topics, tables and agents. Each agent hands its
records to a handler (streams/handlers.py) and publishes what it decided (streams/publish.py).

    ingest role
      [turns] --ingest--> units collection (Qdrant)                      handlers.Ingesting
                     \--> [consolidation]   recurrence fired (RecMem)
                     \--> [windows]         session/day/week/month closed (TiMem)
                     \--> [dead-letter]     invalid input, with the reason
              off its key's partition --> [turns] on it                   streams/routing.py
      window-state table (per user, changelogged) <-- ingest, idle timer  handlers.IdleWindows
    consolidate role
      [consolidation] --consolidate--> [memory.updates]   episodes, facts  handlers.Requests
      [windows] --summarize--> [memory.updates]           tree nodes; a    handlers.Summaries
                 tree-state table (per user)               month also schedules its durative
                                                           job on [deferred]
      [deferred] --retry_deferred--> back to its topic when due, or runs   handlers.Retries
                                     the durative job
      (LLM down or budget spent -> [deferred]; output invalid after repair -> [dead-letter])
    index role
      [memory.updates] --index--> memories collection (its single writer)  handlers.Indexing
    every worker
      [tombstones] --forget--> drops a deleted user's per-user state, and  handlers.Forgetting
                               deletes their points again

Every topic is keyed by tenant/user, so one worker owns all of a user's records (and, with the
embedded store, the user's shard).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import faust
from faust.transport.drivers.aiokafka import Producer as AIOKafkaProducerService
from faust.types import TP, EventT

from memstream.adapters import metrics
from memstream.adapters.kafka import partition_for, track_topics
from memstream.adapters.settings import Settings
from memstream.consumers import Consolidation
from memstream.core.forgetting import Forgotten
from memstream.core.memories import MEMORIES
from memstream.core.unit_views import UNIT_VIEWS
from memstream.core.units import UNITS
from memstream.embedded_store.internal import serve_internal
from memstream.embedded_store.read_leases import ReadLeases
from memstream.schemas.topics import (
    ALL_TOPICS,
    CONSOLIDATION,
    DEFERRED,
    MEMORY_UPDATES,
    TOMBSTONES,
    TURNS,
    WINDOWS,
    TopicSpec,
)
from memstream.streams.consumer import RewindingConsumer, TansuConsumer
from memstream.streams.decisions import made_at
from memstream.streams.faust_adapter import ReadOffsets, batches, faust_settings, manual_acks, on_rebalance
from memstream.streams.handlers import (
    Consolidating,
    Forgetting,
    IdleWindows,
    Indexing,
    Ingesting,
    Received,
    Requests,
    Retries,
    Summaries,
)
from memstream.streams.ingest import IngestProcessor
from memstream.streams.key_ordered import HELD_PER_CALL, KeyOrdered
from memstream.streams.pages import Readiness, add_pages
from memstream.streams.publish import Publisher
from memstream.streams.read_your_writes import OwnWrites, ReadYourWrites, Takeover
from memstream.streams.routing import misplaced
from memstream.streams.table_store import use_changelog_recovery

log = logging.getLogger("memstream")
# How long a rebalance waits for the recalls still reading a revoked partition's store (a recall takes
# tens of milliseconds; the consumer group's rebalance timeout is far longer).
RELEASE_WAIT_S = 10.0

INDEX_BATCH_WITHIN_S = 0.02


def build_app(settings: Settings, processor: IngestProcessor, consolidation: Consolidation) -> faust.App:
    roles = set(settings.roles)
    app = faust.App(settings.app_id, monitor=ReadOffsets(), **faust_settings(settings))
    # faust takes the consumer class from its transport (streams/consumer.py: no skipped records;
    # short fetch waits against Tansu). faust types it a ClassVar, but set on this app's transport
    # instance it leaves other apps in the process (tests) alone.
    app.transport.Consumer = TansuConsumer if settings.tansu_quirks else RewindingConsumer  # type: ignore[misc]
    use_changelog_recovery(app)  # a database ahead of its changelog is emptied, not fatal

    def topic(spec: TopicSpec) -> faust.TopicT:
        return app.topic(
            settings.topic(spec.name),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.topic_partitions,
        )

    def user_table(name: str) -> faust.types.TableT:
        # Keyed by the raw tenant/user bytes; use_partitioner routes changelog records by key like
        # the turns topic, so state stays co-partitioned with its user even when a timer updates it.
        return app.Table(
            name,
            default=None,
            partitions=settings.topic_partitions,
            key_type=bytes,
            value_type=None,  # JSON
            use_partitioner=True,
        )

    # ---- tables -------------------------------------------------------------------------------
    window_state = user_table("window-state")  # open windows (memstream.core.windows.UserWindows)
    # Users deleted through the gateway, with the times that tell their records still on the way
    # from new ones (memstream/core/forgetting.py); kept for good.
    forgotten = user_table("forgotten")
    user_tables = [window_state]  # per-user state a DELETE must clear
    if "consolidate" in roles:
        tree_state = user_table("tree-state")  # memstream.core.tree.TreeState
        user_tables.append(tree_state)

    @app.task
    async def know_changelogs() -> None:
        # A use_partitioner table picks its changelog record's partition from the producer's cached
        # metadata, without waiting for it (faust's key_partition). A producer that does not track a
        # changelog (memstream.adapters.kafka.track_topics) loses it from its metadata, and the write
        # fails (TypeError, retried for ever; seen in tests/test_routing.py on Kafka). Track them all.
        if isinstance(app.producer, AIOKafkaProducerService):
            changelogs = [table.changelog_topic.get_topic_name() for table in app.tables.values()]
            await track_topics(app.producer._ensure_producer(), changelogs)

    # ---- what the handlers share ---------------------------------------------------------------
    # An ingest batch, the erase of a deleted user and the idle timer never interleave: a batch
    # either sees the user forgotten, or ran before the erase; window states read stay current.
    writing = asyncio.Lock()
    barrier = ReadYourWrites(Takeover(settings, settings.topic(MEMORY_UPDATES.name)), OwnWrites())
    publish = Publisher(
        lambda name, key, value, headers: app.producer.send(
            settings.topic(name), key, value, None, None, headers or None
        ),
        barrier.own,
    )
    store_of = processor.shards.get

    def gone(key: bytes | None) -> Forgotten | None:
        return Forgotten.from_json(forgotten.get(key or b""))

    def interrupted() -> bool:
        # The flow stops while the worker rebalances or stops: no index agent reads then.
        return bool(app.should_stop) or not app.flow_control.is_active()

    step = Consolidating(store_of, barrier, gone, interrupted, processor.clock, settings.defer_retry_s)

    # ---- routing ------------------------------------------------------------------------------
    turns_name = settings.topic(TURNS.name)

    def home_of(event: EventT) -> int | None:
        """The partition a turn belongs on, when it arrived on another (``memstream.streams.routing``)."""
        return misplaced(event.message.key, event.message.partition, settings.topic_partitions)

    async def forward(records: list[tuple[EventT, int]]) -> None:
        """Each turn to its key's partition, as it was: same key, value, headers and timestamp (the
        time a deleted user's records are told by), delivered (acks=all) before the caller acks."""
        pending = []
        for event, home in records:
            msg = event.message
            pending.append(
                await app.producer.send(turns_name, msg.key, msg.value, home, msg.timestamp, msg.headers)
            )
            metrics.TURNS_REROUTED.labels(str(msg.partition)).inc()
        await asyncio.gather(*pending)

    # ---- agents -------------------------------------------------------------------------------
    if "ingest" in roles:
        idle = IdleWindows(
            window_state,
            lambda key: partition_for(key, settings.topic_partitions),
            processor.idle_close,
            processor.clock,
        )
        ingesting = Ingesting(processor.process, window_state, gone, idle.saved)
        # Per partition of turns: the offset after the last batch ingested, and when it was.
        ingested: dict[int, tuple[int, float]] = {}

        def turns_behind() -> set[int]:
            """Partitions of turns whose log (as of the latest fetch) holds turns not ingested yet, while
            ingest is working through them: a log end that no batch moved towards for the idle close is
            not turns (a transaction marker takes an offset) or not ours to wait for."""
            now, out = processor.clock(), set()
            for tp in app.consumer.assignment():
                offset, at = ingested.get(tp.partition, (0, 0.0)) if tp.topic == turns_name else (0, 0.0)
                high = app.consumer.highwater(tp) if at else None
                if high is not None and high > offset and now - at < processor.idle_close.total_seconds():
                    out.add(tp.partition)
            return out

        @app.agent(topic(TURNS))
        async def ingest(stream: faust.StreamT) -> None:
            async for events in batches(stream, settings.batch_size, settings.batch_within_s):
                # Turns on a partition other than their key's are forwarded there, not processed
                # here; the forward is delivered before this batch is acknowledged.
                away = {i: home for i, e in enumerate(events) if (home := home_of(e)) is not None}
                await forward([(events[i], home) for i, home in away.items()])
                records = [received(e) for i, e in enumerate(events) if i not in away]
                async with writing:
                    await publish(*await ingesting.batch(records))
                for e in events:
                    msg, at = e.message, processor.clock()
                    ingested[msg.partition] = (
                        max(ingested.get(msg.partition, (0, at))[0], msg.offset + 1),
                        at,
                    )

        @app.timer(settings.idle_check_interval_s)
        async def close_idle_windows() -> None:
            # Slices of users, the lock released in between so ingest goes on while many close.
            while not interrupted():  # the tables may be recovering: the index is built once whole
                async with writing:  # between two ingest batches: the states read here stay current
                    done = idle.close(owned(), readiness.assignments, behind=turns_behind())
                    await publish(done)
                if not done.windows:
                    return

    if "consolidate" in roles:
        requests = Requests(step, consolidation.recurrence.handle)
        summaries = Summaries(step, consolidation.tree.handle, tree_state, publish, settings.durative_delay_s)
        retries = Retries(step, consolidation.tree.durative)

        # Each stage works on many users' records at once, one user's strictly in order
        # (streams/key_ordered.py), holding HELD_PER_CALL records per LLM call a worker makes at once.
        at_once = HELD_PER_CALL * settings.llm_concurrency

        async def key_ordered(
            stream: faust.StreamT, stage: str, handle: Callable[[Received], Awaitable[None]]
        ) -> None:
            events, ack = manual_acks(stream)
            await KeyOrdered(stage, at_once).run(events, lambda event: handle(received(event)), ack)

        async def request(r: Received) -> None:
            await publish(await requests.request(r))

        async def deferred(r: Received) -> None:
            await publish(await retries.deferred(r))

        @app.agent(topic(CONSOLIDATION))
        async def consolidate(stream: faust.StreamT) -> None:
            await key_ordered(stream, CONSOLIDATION.name, request)

        @app.agent(topic(WINDOWS))
        async def summarize(stream: faust.StreamT) -> None:
            await key_ordered(stream, WINDOWS.name, summaries.window)

        @app.agent(topic(DEFERRED))
        async def retry_deferred(stream: faust.StreamT) -> None:
            await key_ordered(stream, DEFERRED.name, deferred)

    if "index" in roles:
        indexing = Indexing(consolidation.indexer.apply, store_of, gone, processor.clock)

        @app.agent(topic(MEMORY_UPDATES))
        async def index(stream: faust.StreamT) -> None:
            # Not the turns' batching wait: a user's next consolidation waits until its previous
            # updates are indexed (read your writes), so this wait sits on every step of the user's
            # chain of windows. Under load batches still fill; alone, an update goes at once.
            async for events in batches(stream, settings.batch_size, INDEX_BATCH_WITHIN_S):
                await publish(*await indexing.batch([received(e) for e in events]))

    collections = [UNITS, UNIT_VIEWS, MEMORIES] if {"consolidate", "index"} & roles else [UNITS, UNIT_VIEWS]
    forgetting = Forgetting(forgotten, user_tables, barrier, store_of, collections, processor.clock)

    @app.agent(topic(TOMBSTONES))
    async def forget(stream: faust.StreamT) -> None:
        async for event in stream.events():
            async with writing:  # between two ingest batches
                await publish(await forgetting.tombstone(received(event)))

    # ---- partitions and stores ----------------------------------------------------------------
    data_topics = {settings.topic(spec.name) for spec in ALL_TOPICS}

    def owned() -> set[int]:
        """Partitions of the turns topic this worker processes now."""
        return {tp.partition for tp in app.consumer.assignment() if tp.topic == turns_name}

    # Partitions whose store this worker holds: those of any data topic it is assigned (a worker may
    # run only some of the roles). Kept here rather than read from the consumer, which still lists
    # revoked partitions until the next assignment: opening one of their stores then (a gateway
    # read, /status) would keep it from its next owner.
    holding: set[int] = set()

    def held() -> set[int]:
        return set(holding)

    def take_stores(assigned: set[TP]) -> None:
        holding.clear()
        holding.update(tp.partition for tp in assigned if tp.topic in data_topics)
        barrier.takeover.assigned(holding)

    leases = ReadLeases(settings.worker_recall_concurrency)

    def release_stores(revoked: set[TP]) -> None:
        # Sent after faust has waited for in-flight batches; the partitions' next owner opens
        # their stores. Recalls running in threads on them finish first (no new one starts: they
        # are no longer held, and the loop is here).
        gone = sorted({tp.partition for tp in revoked if tp.topic in data_topics})
        holding.difference_update(gone)
        if not leases.wait_idle(gone, RELEASE_WAIT_S):
            log.warning("closing the stores of partitions %s under a recall still running", gone)
        processor.shards.release(gone)
        for tp in revoked:
            metrics.CONSUMER_LAG.remove(tp.topic, str(tp.partition))

    readiness = Readiness()
    on_rebalance(app.on_partitions_assigned, readiness.assigned)
    on_rebalance(app.on_partitions_revoked, release_stores)
    on_rebalance(app.on_partitions_assigned, take_stores)

    # ---- lag and web pages --------------------------------------------------------------------
    def update_lag() -> None:
        """Records not yet read, per partition of every topic this worker reads: a backlog shows
        wherever it builds up (turns, consolidation, windows, memory.updates, deferred)."""
        read = app.monitor.tp_read_offsets or {}
        for tp in app.consumer.assignment():
            high = app.consumer.highwater(tp) if tp.topic in data_topics else None
            if high is not None:
                done = read.get(tp, -1) + 1
                metrics.CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(max(high - done, 0))

    @app.timer(5.0)
    async def report_lag() -> None:
        update_lag()

    add_pages(
        app,
        readiness,
        processor,
        held,
        update_lag,
        serve_internal(app, settings, held, store_of, processor.embedder, leases),
    )
    return app


def received(event: EventT) -> Received:
    msg = event.message
    return Received(
        msg.key, event.value, msg.topic, msg.partition, msg.offset, made_at(msg.headers, msg.timestamp)
    )

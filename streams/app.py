r"""The stream topology, declared in one place. It reads like the diagram in DESIGN.md:

    ingest role
      [turns] --ingest--> units collection (Qdrant)
                     \--> [consolidation]   recurrence fired (RecMem)
                     \--> [windows]         session/day/week/month closed (TiMem)
                     \--> [dead-letter]     invalid input, with the reason
      window-state table (per user, changelogged) <-- ingest, idle timer
    consolidate role
      [consolidation] --consolidate--> [memory.updates]   episodes, facts, invalidations
      [windows] --summarize--> [memory.updates]           tree nodes; a month also schedules
                 tree-state table (per user)               its durative job on [deferred]
      [deferred] --retry_deferred--> back to its topic when due, or runs the durative job
      (LLM down or budget spent -> [deferred]; output invalid after repair -> [dead-letter])
    index role
      [memory.updates] --index--> memories collection (its single writer)
    every worker
      [tombstones] --forget--> drops a deleted user's window and tree state, deletes their
                               points again (whatever landed after the gateway's delete)

Every topic is keyed by tenant/user, so one worker owns all of a user's records (and, with the
embedded store, the user's shard).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, TypeVar

import faust
import orjson
from faust.sensors import Monitor
from faust.types import TP, EventT, Message, StreamT
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from consumers import Consolidation
from consumers.memories import MEMORIES
from consumers.own_writes import Interrupted
from memstream import metrics
from memstream.kafka import by_key, partition_for, ssl_context
from memstream.llm import BudgetExhausted, InvalidOutput, LLMError, LLMUnavailable
from memstream.pause import until_available
from memstream.settings import Settings
from memstream.store.base import Filter, VectorStore
from memstream.store.remote import serve
from memstream.tree import TreeState, in_closing_order
from memstream.units import UNITS, USER_FIELD
from memstream.windows import UserWindows, close_idle
from schemas.events import (
    ConsolidationRequest,
    DeadLetter,
    DeadLetterStage,
    Deferred,
    Record,
    Tombstone,
    WindowClosed,
    WindowLevel,
)
from schemas.memory import MemoryUpdate
from schemas.topics import (
    ALL_TOPICS,
    CONSOLIDATION,
    DEAD_LETTER,
    DEFERRED,
    MEMORY_UPDATES,
    TOMBSTONES,
    TURNS,
    WINDOWS,
    TopicSpec,
)
from streams.consumer import RewindingConsumer, TansuConsumer
from streams.forgetting import Forgotten, made_before, sent_before
from streams.ingest import Incoming, IngestProcessor, dead_letter
from streams.routing import misplaced
from streams.takeover import Takeover
from streams.validation import Rejection

R = TypeVar("R", bound=Record)
Work = Callable[[VectorStore, Record], Awaitable[list[MemoryUpdate]]]
DURATIVE = "durative"  # deferred work that is not a topic's record: a month's durative memory
MAX_POLL_RECORDS = 100  # records per consumer fetch (see faust_settings)
DEFER_HOLD_S = 5.0  # deferred work due within this is waited for in place, later work re-queued


class Outcome(Enum):
    """What became of one piece of consolidation work."""

    DONE = "done"  # its updates delivered
    DEFERRED = "deferred"  # on the deferred topic, to be tried again
    SKIPPED = "skipped"  # dead-lettered, or made from a deleted user's data


def faust_credentials(settings: Settings) -> faust.types.auth.CredentialsT | None:
    """The brokers' TLS / SASL settings as faust credentials (None for PLAINTEXT)."""
    protocol = settings.kafka_security_protocol
    context = ssl_context(settings) if protocol in ("SSL", "SASL_SSL") else None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        assert settings.kafka_sasl_password is not None  # the settings refuse SASL without one
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_password.get_secret_value(),
            mechanism=settings.kafka_sasl_mechanism,
            ssl_context=context,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def faust_settings(settings: Settings) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "broker": f"kafka://{settings.brokers}",
        "broker_credentials": faust_credentials(settings),
        "store": "memory://",  # table state is rebuilt from its changelog topic
        # faust's own directory, under the data dir (not the working directory: a pod's root
        # file system is read-only)
        "datadir": str(settings.data_dir / "faust"),
        "topic_partitions": settings.topic_partitions,
        "topic_replication_factor": settings.topic_replication_factor,
        "web_enabled": settings.metrics_port > 0,
        "web_port": settings.metrics_port,
        "web_bind": settings.metrics_host,
        "web_host": settings.metrics_host,
        "producer_acks": -1,
        "producer_partitioner": by_key,  # partition_for, stated (memstream.kafka.by_key)
        "consumer_auto_offset_reset": "earliest",
        "broker_commit_interval": settings.commit_interval_s,
        "topic_allow_declare": True,
        # faust stops fetching a partition once its agent's buffer is 80 % full (mode's
        # FlowControlQueue), but what was fetched is still delivered, and a delivery into a full
        # buffer blocks the delivery of every record, to every agent. With a long backlog that
        # stalled a worker with every role: consolidation waits for its own updates to be indexed
        # (consumers/own_writes.py), the index agent never got them, one 30 s timeout per request
        # (bench/soak.py, 100,000 turns). At most MAX_POLL_RECORDS per fetch, at most one fetch per
        # partition after the pause: the remaining 20 % of the buffer must hold them.
        "broker_max_poll_records": MAX_POLL_RECORDS,
        "stream_buffer_maxsize": max(4096, 5 * settings.topic_partitions * MAX_POLL_RECORDS),
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


class Readiness:
    """A worker is ready once the consumer group has given it its first assignment (after its
    agents and tables took the partitions). An empty assignment counts: a replica beyond the
    partition count is a standby, which is all it can be. It stays ready through later rebalances."""

    def __init__(self) -> None:
        self.assignments = 0

    def assigned(self, sender: Any, assigned: set[TP], **kwargs: Any) -> None:
        self.assignments += 1

    def answer(self, partitions: Sequence[int]) -> tuple[int, dict[str, Any]]:
        """HTTP status and body of ``/readyz``."""
        if not self.assignments:
            return 503, {"ready": False, "reason": "waiting for the first partition assignment"}
        return 200, {"ready": True, "partitions": sorted(partitions)}


def build_app(settings: Settings, processor: IngestProcessor, consolidation: Consolidation) -> faust.App:
    app = faust.App(settings.app_id, monitor=ReadOffsets(), **faust_settings(settings))
    # faust takes the consumer class from its transport; see streams/consumer.py (no skipped
    # records; short fetch waits against Tansu).
    app.transport.Consumer = TansuConsumer if settings.tansu_quirks else RewindingConsumer  # type: ignore[misc]
    readiness = Readiness()
    app.on_partitions_assigned.connect(readiness.assigned)  # type: ignore[arg-type]

    def topic(spec: TopicSpec) -> faust.TopicT:
        return app.topic(
            settings.topic(spec.name),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.topic_partitions,
        )

    turns_name = settings.topic(TURNS.name)
    turns = topic(TURNS)
    data_topics = {settings.topic(spec.name) for spec in ALL_TOPICS}
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

    # Users deleted through the gateway, with the times that tell their records still on the way
    # from new ones (streams/forgetting.py); co-partitioned with their turns, kept for good.
    forgotten = app.Table(
        "forgotten",
        default=None,
        partitions=settings.topic_partitions,
        key_type=bytes,
        value_type=None,  # Forgotten.to_json()
        use_partitioner=True,
    )
    # An ingest batch, the erase of a deleted user and the idle timer never interleave: a batch
    # either sees the user forgotten, or ran before the erase; window states read stay current.
    writing = asyncio.Lock()
    takeover = Takeover(settings, settings.topic(MEMORY_UPDATES.name))

    def interrupted() -> bool:
        # The flow stops while the worker rebalances or stops: no index agent reads then.
        return bool(app.should_stop) or not app.flow_control.is_active()

    def gone(key: bytes | None) -> Forgotten | None:
        return Forgotten.from_json(forgotten.get(key or b""))

    def dropped(stage: str, n: int) -> None:
        if n:
            metrics.FORGOTTEN_RECORDS.labels(stage).inc(n)

    async def publish(*outputs: tuple[TopicSpec, Sequence[Record]]) -> None:
        """Send every record, then wait until all are delivered (acks=all): input offsets are
        acked only after that. Straight to the producer: the records are bytes already, and
        faust's channel machinery costs more per record than the send itself."""
        pending = [
            await app.producer.send(
                settings.topic(spec.name), _key(r).encode(), r.to_bytes(), None, None, None
            )
            for spec, records in outputs
            for r in records
        ]
        await asyncio.gather(*pending)

    def home_of(event: EventT) -> int | None:
        """The partition a turn belongs on, when it arrived on another (``streams.routing``)."""
        return misplaced(event.message.key, event.message.partition, settings.topic_partitions)

    async def forward(records: Sequence[tuple[EventT, int]]) -> None:
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

    async def readable(event: EventT, model: type[R]) -> R | None:
        """The event's record, or None once it went to the dead-letter topic as unreadable."""
        try:
            return model.from_bytes(event.value)
        except ValueError as exc:
            await publish(
                (
                    DEAD_LETTER,
                    [_dead(event, DeadLetterStage.VALIDATE, "invalid_record", exc, processor.clock())],
                )
            )
            return None

    def counted(closed: Sequence[WindowClosed]) -> Sequence[WindowClosed]:
        # Counted where published: the agent and the idle timer both close windows.
        for w in closed:
            metrics.WINDOWS_CLOSED.labels(w.level.value, w.reason.value).inc()
        return closed

    if "ingest" in settings.roles:

        @app.agent(turns)
        async def ingest(stream: faust.StreamT) -> None:
            # take_events (not take) keeps each record's partition and offset for dead letters.
            batches = stream.take_events(settings.batch_size, within=settings.batch_within_s)  # type: ignore[attr-defined]
            async for events in batches:
                # Turns on a partition other than their key's are forwarded there, not processed
                # here; the forward is delivered before this batch is acknowledged.
                away = {i: home for i, e in enumerate(events) if (home := home_of(e)) is not None}
                await forward([(events[i], home) for i, home in away.items()])
                events = [e for i, e in enumerate(events) if i not in away]
                async with writing:
                    kept = [e for e in events if not sent_before(gone(e.message.key), e.message.timestamp)]
                    dropped("ingest", len(events) - len(kept))
                    batch = [_incoming(e) for e in kept]
                    result = await until_available(
                        lambda: processor.process(batch, window_state),  # noqa: B023  (awaited here)
                        "ingest",
                        asyncio.sleep,
                    )
                    await publish(
                        (CONSOLIDATION, result.consolidation),
                        (WINDOWS, counted(result.windows)),
                        (DEAD_LETTER, result.dead_letters),
                    )
                    window_state.update(result.window_state)  # after: see BatchResult

    async def consolidate_one(
        event: EventT, spec: TopicSpec, work: Work, value: bytes | None = None, source: str | None = None
    ) -> Outcome:
        """One unit of consolidation work and its failure paths: LLM budget spent, LLM down, or the
        worker stopping or rebalancing -> deferred (retried later, never dropped); output still
        invalid after the repair attempt, or an unreadable record -> dead letter. The record is the
        event's unless ``value`` is given (deferred work, a parked window); ``source`` names its
        kind when that is not ``spec``'s topic (a month's durative memory)."""
        now = processor.clock()
        value = event.value or b"" if value is None else value
        key = event.message.key or b""
        source = source or spec.name
        if made_before(gone(key), event.message.timestamp):
            dropped(source, 1)  # made from a deleted user's data
            return Outcome.SKIPPED
        try:
            record = spec.model.from_bytes(value)
        except ValueError as exc:
            metrics.CONSOLIDATIONS.labels(source, "invalid").inc()
            await publish((DEAD_LETTER, [_dead(event, DeadLetterStage.VALIDATE, "invalid_record", exc, now)]))
            return Outcome.SKIPPED
        if source == DURATIVE:
            trigger = DURATIVE
        elif isinstance(record, WindowClosed):
            trigger = record.level.value
        else:
            trigger = "recurrence"
        try:
            store = processor.shards.get(event.message.partition)

            async def attempt() -> list[MemoryUpdate]:
                # What is already published, indexed first: decisions must not depend on the
                # indexer's pace (streams/takeover.py, consumers/own_writes.py).
                await takeover.ready(event.message.partition, interrupted)
                await consolidation.own_writes.visible(store, key.decode("utf-8", "replace"), interrupted)
                return await work(store, record)

            updates = await until_available(attempt, "consolidate", asyncio.sleep)
        except (BudgetExhausted, LLMUnavailable, Interrupted) as exc:
            metrics.CONSOLIDATIONS.labels(trigger, "deferred").inc()
            later = _deferred(source, key, value, exc, now, settings.defer_retry_s)
            await publish((DEFERRED, [later]))
            return Outcome.DEFERRED
        except InvalidOutput as exc:
            metrics.CONSOLIDATIONS.labels(trigger, "invalid").inc()
            dead = _dead(event, DeadLetterStage.CONSOLIDATE, "invalid_llm_output", exc, now, value)
            await publish((DEAD_LETTER, [dead]))
            return Outcome.SKIPPED
        if made_before(gone(key), now):
            dropped(source, 1)  # the user was deleted while this ran
            return Outcome.SKIPPED
        for u in updates:
            metrics.MEMORY_UPDATES.labels(u.op.value, u.memory.kind.value if u.memory else "-").inc()
        metrics.CONSOLIDATIONS.labels(trigger, "done" if updates else "nothing").inc()
        await publish((MEMORY_UPDATES, updates))
        consolidation.own_writes.published(updates)
        return Outcome.DONE

    user_tables = [window_state]  # per-user state a DELETE must clear

    if "consolidate" in settings.roles:
        # Per-user Temporal Memory Tree state (memstream.tree.TreeState as JSON), co-partitioned too.
        tree_state = app.Table(
            "tree-state",
            default=None,
            partitions=settings.topic_partitions,
            key_type=bytes,
            value_type=None,
            use_partitioner=True,
        )
        user_tables.append(tree_state)

        @app.agent(topic(CONSOLIDATION))
        async def consolidate(stream: faust.StreamT) -> None:
            async def work(store: VectorStore, request: Record) -> list[MemoryUpdate]:
                assert isinstance(request, ConsolidationRequest)
                return await consolidation.recurrence.handle(store, request)

            async for event in stream.events():
                await consolidate_one(event, CONSOLIDATION, work)

        @app.agent(topic(WINDOWS))
        async def summarize(stream: faust.StreamT) -> None:
            async for event in stream.events():
                if (window := await readable(event, WindowClosed)) is None:
                    continue
                key, started = event.message.key or b"", processor.clock()
                raw = tree_state.get(key)
                state = await in_closing_order(
                    TreeState.from_json(raw) if raw else TreeState(),
                    window,
                    # A parked window is not the event's record: its own bytes are summarised.
                    lambda state, w: summarise(event, w, state, None if w is window else w.to_bytes()),  # noqa: B023
                )
                # The state moves on only once the nodes are delivered: a crash in between replays the
                # window against the old state, which rebuilds the same node (same id, same children).
                if not made_before(gone(key), started):
                    tree_state[key] = state.to_json()

        async def summarise(
            event: EventT, window: WindowClosed, state: TreeState, parked: bytes | None
        ) -> tuple[bool, TreeState]:
            """Whether the window is done with (summarised, or dropped: not deferred), and the
            state after it."""
            after: list[TreeState] = []

            async def work(store: VectorStore, record: Record) -> list[MemoryUpdate]:
                assert isinstance(record, WindowClosed)
                new, updates = await consolidation.tree.handle(store, state, record)
                after.append(new)
                return updates

            outcome = await consolidate_one(event, WINDOWS, work, parked)
            if outcome is Outcome.DONE and window.level == WindowLevel.MONTH:
                # Durative memory clusters the month's facts, some of which may still be on their
                # way from recurrence consolidation: it runs once they have surely landed.
                due = datetime.fromtimestamp(processor.clock(), UTC) + timedelta(
                    seconds=settings.durative_delay_s
                )
                job = Deferred(
                    source_topic=DURATIVE,
                    key=window.key,
                    value=window.to_bytes(),
                    reason="durative_due",
                    not_before=due,
                )
                await publish((DEFERRED, [job]))
            return outcome is not Outcome.DEFERRED, after[0] if outcome is Outcome.DONE else state

    if "index" in settings.roles:

        @app.agent(topic(MEMORY_UPDATES))
        async def index(stream: faust.StreamT) -> None:
            batches = stream.take_events(settings.batch_size, within=settings.batch_within_s)  # type: ignore[attr-defined]
            async for events in batches:
                by_partition: dict[int, list[MemoryUpdate]] = {}
                dead = []
                for e in events:
                    if made_before(gone(e.message.key), e.message.timestamp):
                        dropped("index", 1)  # made from a deleted user's data
                        continue
                    try:
                        by_partition.setdefault(e.message.partition, []).append(
                            MemoryUpdate.from_bytes(e.value)
                        )
                    except ValueError as exc:
                        now = processor.clock()
                        dead.append(_dead(e, DeadLetterStage.VALIDATE, "invalid_record", exc, now))
                for partition, updates in by_partition.items():
                    store = processor.shards.get(partition)
                    await until_available(
                        lambda: consolidation.indexer.apply(store, updates),  # noqa: B023  (awaited here)
                        "index",
                        asyncio.sleep,
                    )
                await publish((DEAD_LETTER, dead))

    if "consolidate" in settings.roles:

        @app.agent(topic(DEFERRED))
        async def retry_deferred(stream: faust.StreamT) -> None:
            # In order per partition. A record due soon is waited for in place; one due later (a
            # spent budget waits for UTC midnight) goes back to the end of its partition, so that
            # it holds up neither the records behind it (another tenant's retry) nor a stop.
            async for event in stream.events():
                if (deferred := await readable(event, Deferred)) is None:
                    continue
                wait = deferred.not_before.timestamp() - processor.clock()
                if wait > DEFER_HOLD_S:
                    await asyncio.sleep(1.0)  # paced: a partition of waiting records cycles once a second
                    await publish((DEFERRED, [deferred]))
                    continue
                await asyncio.sleep(max(0.0, wait))
                if deferred.source_topic == DURATIVE:

                    async def durative(store: VectorStore, window: Record) -> list[MemoryUpdate]:
                        assert isinstance(window, WindowClosed)
                        return await consolidation.tree.durative(store, window)

                    await consolidate_one(event, WINDOWS, durative, deferred.value, DURATIVE)
                    continue
                name = settings.topic(deferred.source_topic)
                await (await app.producer.send(name, deferred.key.encode(), deferred.value, None, None, None))

    @app.agent(topic(TOMBSTONES))
    async def forget(stream: faust.StreamT) -> None:
        """A user deleted through the gateway: remember when (so that their records still on the
        way are dropped where they arrive: streams/forgetting.py), drop their per-user state (open
        windows, memory tree, pending own writes), and delete their points again (whatever landed
        after the gateway's delete)."""
        async for event in stream.events():
            if (stone := await readable(event, Tombstone)) is None:
                continue
            key = stone.key.encode()
            store = processor.shards.get(event.message.partition)
            mine = Filter(equals={USER_FIELD: stone.key})

            async def erase() -> None:
                store.delete(UNITS, mine)  # noqa: B023  (awaited in this iteration)
                if {"consolidate", "index"} & set(settings.roles):
                    store.delete(MEMORIES, mine)  # noqa: B023

            async with writing:  # between two ingest batches
                forgotten[key] = Forgotten(stone.deleted_at.timestamp(), processor.clock()).to_json()
                consolidation.own_writes.forget(stone.key)
                for table in user_tables:
                    if key in table:
                        del table[key]
                await until_available(erase, "forget", asyncio.sleep)

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

    def take_stores(sender: Any, assigned: set[TP], **kwargs: Any) -> None:
        holding.clear()
        holding.update(tp.partition for tp in assigned if tp.topic in data_topics)
        takeover.assigned(holding)

    def release_stores(sender: Any, revoked: set[TP], **kwargs: Any) -> None:
        # Sent after faust has waited for in-flight batches; the partitions' next owner opens
        # their stores.
        gone = sorted({tp.partition for tp in revoked if tp.topic in data_topics})
        holding.difference_update(gone)
        processor.shards.release(gone)
        for tp in revoked:
            metrics.CONSUMER_LAG.remove(tp.topic, str(tp.partition))

    # mode's annotation of connect() is a union of callables that mypy cannot match a def against.
    app.on_partitions_revoked.connect(release_stores)  # type: ignore[arg-type]
    app.on_partitions_assigned.connect(take_stores)  # type: ignore[arg-type]

    if "ingest" in settings.roles:

        @app.timer(settings.idle_check_interval_s)
        async def close_idle_windows() -> None:
            closed = []
            states: dict[bytes, Any] = {}
            async with writing:  # between two ingest batches: the states read here stay current
                now = processor.clock()
                mine = owned()
                for key, raw in list(window_state.items()):
                    # The in-memory table also holds standby copies of other workers' users: skip them.
                    if not raw or partition_for(key, settings.topic_partitions) not in mine:
                        continue
                    state, done = close_idle(
                        UserWindows.from_json(raw), now=now, idle_close=processor.idle_close
                    )
                    if done:
                        states[key] = state.to_json()
                        closed.extend(done)
                # Published first: a crash in between then closes the windows again (same ids),
                # where saved first it would lose them.
                await publish((WINDOWS, counted(closed)))
                window_state.update(states)

    @app.timer(5.0)
    async def report_lag() -> None:
        update_lag()

    def update_lag() -> None:
        """Records not yet read, per partition of every topic this worker reads: a backlog shows
        wherever it builds up (turns, consolidation, windows, memory.updates, deferred)."""
        read = app.monitor.tp_read_offsets or {}
        for tp in app.consumer.assignment():
            high = app.consumer.highwater(tp) if tp.topic in data_topics else None
            if high is not None:
                done = read.get(tp, -1) + 1
                metrics.CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(max(high - done, 0))

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        return web.bytes(generate_latest(), content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        return web.json({"ok": True})

    @app.page("/readyz")
    async def readyz(web: Any, request: Any) -> Any:
        status, body = readiness.answer(sorted(held()))
        return web.json(body, status=status)

    @app.page("/status")
    async def status_page(web: Any, request: Any) -> Any:
        update_lag()
        lag = {
            f"{s.labels['topic']}/{s.labels['partition']}": s.value
            for m in metrics.CONSUMER_LAG.collect()
            for s in m.samples
        }
        partitions = sorted(held())
        body = {**processor.status(partitions), "partitions": partitions, "lag": lag}
        return web.bytes(orjson.dumps(body), content_type="application/json")

    @app.page("/store/{partition}/{op}")
    class StoreView(faust.web.View):
        """The stores this worker holds, for a gateway (``memstream.store.remote``): with the
        embedded store no other process may open a partition's shard."""

        async def post(self, request: Any, partition: str, op: str) -> Any:
            query = await request.read()  # first: no await between the check and the store's use
            if not partition.isdigit() or int(partition) not in held():
                return self.error(409, f"partition {partition} is not held here")
            try:
                body = serve(processor.shards.get(int(partition)), op, query)
            except ValueError as exc:
                return self.error(400, str(exc))
            return self.bytes(body, content_type="application/json")

    return app


def _key(record: Record) -> str:
    return getattr(record, "key", None) or ""


def _incoming(event: EventT) -> Incoming:
    msg = event.message
    key = msg.key.decode("utf-8", "replace") if isinstance(msg.key, bytes) else None
    return Incoming(value=event.value, key=key, topic=msg.topic, partition=msg.partition, offset=msg.offset)


def _dead(
    event: EventT, stage: DeadLetterStage, reason: str, exc: Exception, now: float, value: bytes | None = None
) -> DeadLetter:
    """A consolidation record that failed; ``value``: the record inside a deferred one."""
    rec = _incoming(event)
    if value is not None:
        rec = replace(rec, value=value)
    return dead_letter(rec, Rejection(stage, reason, str(exc)[:2000]), now)


def _deferred(
    source: str, key: bytes, value: bytes, exc: LLMError | Interrupted, now: float, retry_s: float
) -> Deferred:
    if isinstance(exc, BudgetExhausted):
        reason, not_before = "token_budget", exc.resets_at
    elif isinstance(exc, Interrupted):  # handed on to whoever holds the partition next, at once
        reason, not_before = "rebalance", datetime.fromtimestamp(now, UTC)
    else:
        reason, not_before = "llm_unavailable", datetime.fromtimestamp(now, UTC) + timedelta(seconds=retry_s)
    return Deferred(
        source_topic=source,
        key=key.decode("utf-8", "replace"),
        value=value,
        reason=reason,
        not_before=not_before,
    )

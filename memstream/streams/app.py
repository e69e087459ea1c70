r"""The stream topology, declared in one place: each role's agents and timers. Each agent hands its
records to a handler (streams/handlers.py) and publishes what it decided (streams/publish.py); the
tables, stores and what the agents share are the worker's (streams/worker.py).

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
from collections.abc import Awaitable, Callable

import faust
from faust.types import EventT

from memstream.adapters import metrics
from memstream.adapters.kafka import partition_for
from memstream.core.memories import MEMORIES
from memstream.core.unit_views import UNIT_VIEWS
from memstream.core.units import UNITS
from memstream.schemas.topics import CONSOLIDATION, DEFERRED, MEMORY_UPDATES, TOMBSTONES, TURNS, WINDOWS
from memstream.streams.decisions import made_at
from memstream.streams.faust_adapter import batches, manual_acks
from memstream.streams.handlers import Forgetting, IdleWindows, Ingesting
from memstream.streams.ingest import Incoming
from memstream.streams.key_ordered import HELD_PER_CALL, KeyOrdered
from memstream.streams.routing import misplaced
from memstream.streams.worker import Worker

INDEX_BATCH_WITHIN_S = 0.02


def build_app(worker: Worker) -> faust.App:
    """The agents and timers of ``worker``'s roles, and the one every worker runs; its faust app."""
    if "ingest" in worker.roles:
        _ingest_role(worker)
    if "consolidate" in worker.roles:
        _consolidate_role(worker)
    if "index" in worker.roles:
        _index_role(worker)
    _every_worker(worker)
    return worker.app


def _ingest_role(worker: Worker) -> None:
    app, settings, publish, partitions = worker.app, worker.settings, worker.publish, worker.partitions
    window_state = worker.tables.window_state
    idle = IdleWindows(
        window_state,
        lambda key: partition_for(key, settings.kafka.topic_partitions),
        worker.idle_close,
        worker.clock,
    )
    ingesting = Ingesting(worker.processor.process, window_state, worker.gone, idle.saved)

    @app.agent(worker.topic(TURNS))
    async def ingest(stream: faust.StreamT) -> None:
        async for events in batches(stream, settings.worker.batch_size, settings.worker.batch_within_s):
            # Turns on a partition other than their key's are forwarded there, not processed
            # here; the forward is delivered before this batch is acknowledged.
            away = {i: home for i, e in enumerate(events) if (home := _home_of(worker, e)) is not None}
            await _forward(worker, [(events[i], home) for i, home in away.items()])
            records = [received(e) for i, e in enumerate(events) if i not in away]
            async with worker.writing:
                await publish(*await ingesting.batch(records))
            partitions.ingested(events)

    @app.timer(settings.windows.idle_check_interval_s)
    async def close_idle_windows() -> None:
        # Slices of users, the lock released in between so ingest goes on while many close.
        while not worker.interrupted():  # the tables may be recovering: the index is built once whole
            async with worker.writing:  # between two ingest batches: the states read here stay current
                done = idle.close(
                    partitions.owned(), worker.readiness.assignments, behind=partitions.turns_behind()
                )
                await publish(done)
            if not done.windows:
                return


def _consolidate_role(worker: Worker) -> None:
    app = worker.app
    assert worker.tables.tree_state is not None  # the consolidate role's table
    handlers = worker.handlers.consolidators(worker.tables.tree_state)

    # Each stage works on many users' records at once, one user's strictly in order
    # (streams/key_ordered.py), holding HELD_PER_CALL records per LLM call a worker makes at once.
    at_once = HELD_PER_CALL * worker.settings.llm.llm_concurrency

    async def key_ordered(
        stream: faust.StreamT, stage: str, handle: Callable[[Incoming], Awaitable[None]]
    ) -> None:
        events, ack = manual_acks(stream)
        await KeyOrdered(stage, at_once).run(events, lambda event: handle(received(event)), ack)

    @app.agent(worker.topic(CONSOLIDATION))
    async def consolidate(stream: faust.StreamT) -> None:
        await key_ordered(stream, CONSOLIDATION.name, handlers.request)

    @app.agent(worker.topic(WINDOWS))
    async def summarize(stream: faust.StreamT) -> None:
        await key_ordered(stream, WINDOWS.name, handlers.window)

    @app.agent(worker.topic(DEFERRED))
    async def retry_deferred(stream: faust.StreamT) -> None:
        await key_ordered(stream, DEFERRED.name, handlers.deferred)


def _index_role(worker: Worker) -> None:
    indexing = worker.handlers.indexing()

    @worker.app.agent(worker.topic(MEMORY_UPDATES))
    async def index(stream: faust.StreamT) -> None:
        # Not the turns' batching wait: a user's next consolidation waits until its previous
        # updates are indexed (read your writes), so this wait sits on every step of the user's
        # chain of windows. Under load batches still fill; alone, an update goes at once.
        async for events in batches(stream, worker.settings.worker.batch_size, INDEX_BATCH_WITHIN_S):
            await worker.publish(*await indexing.batch([received(e) for e in events]))


def _every_worker(worker: Worker) -> None:
    collections = (
        [UNITS, UNIT_VIEWS, MEMORIES] if {"consolidate", "index"} & worker.roles else [UNITS, UNIT_VIEWS]
    )
    tables = worker.tables
    forgetting = Forgetting(
        tables.forgotten, tables.per_user, worker.barrier, worker.store_of, collections, worker.clock
    )

    @worker.app.agent(worker.topic(TOMBSTONES))
    async def forget(stream: faust.StreamT) -> None:
        async for event in stream.events():
            async with worker.writing:  # between two ingest batches
                await worker.publish(await forgetting.tombstone(received(event)))


def _home_of(worker: Worker, event: EventT) -> int | None:
    """The partition a turn belongs on, when it arrived on another (``memstream.streams.routing``)."""
    return misplaced(event.message.key, event.message.partition, worker.settings.kafka.topic_partitions)


async def _forward(worker: Worker, records: list[tuple[EventT, int]]) -> None:
    """Each turn to its key's partition, as it was: same key, value, headers and timestamp (the
    time a deleted user's records are told by), delivered (acks=all) before the caller acks."""
    turns, pending = worker.settings.kafka.topic(TURNS.name), []
    for event, home in records:
        msg = event.message
        pending.append(
            await worker.app.producer.send(turns, msg.key, msg.value, home, msg.timestamp, msg.headers)
        )
        metrics.TURNS_REROUTED.labels(str(msg.partition)).inc()
    await asyncio.gather(*pending)


def received(event: EventT) -> Incoming:
    msg = event.message
    return Incoming.read(
        msg.key, event.value, msg.topic, msg.partition, msg.offset, made_at(msg.headers, msg.timestamp)
    )

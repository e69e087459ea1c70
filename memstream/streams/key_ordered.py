"""Runs a consolidation stage's records concurrently across users and strictly in order per user
(memstream/core/key_order.py), acknowledging each record to faust only once it and every record
before it on its partition are done: faust commits acknowledged offsets, so a crash redelivers from
the first record not yet done and skips none.

At most ``limit`` records are held (taken and not yet acknowledged). At the limit the stage stops
reading its stream: faust's buffer for the stream fills and faust pauses fetching its partitions,
so a backlog waits in Kafka, not in memory.

The handlers turn every failure they know into a decision (streams/handlers.py). A record whose
handler raises anyway (the broker unreachable while its output is published) is tried again in place,
with backoff, logged and counted: neither skipped (acknowledging it would lose its work) nor left
unacknowledged behind a crashed stage, where faust would wait for it forever at the next rebalance
or stop. Its user waits meanwhile; other users go on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, Awaitable, Callable

from faust.types import EventT

from memstream.adapters import metrics
from memstream.core.key_order import Again, Entry, KeyOrder

Handle = Callable[[EventT], Awaitable[None]]
Ack = Callable[[EventT], Awaitable[object]]
Clock = Callable[[], float]  # epoch seconds
Sleep = Callable[[float], Awaitable[None]]

log = logging.getLogger(__name__)

# Records a stage holds per LLM call in flight (MEMSTREAM_LLM_CONCURRENCY). Held records include
# those waiting behind their user's previous one, and a closing user's windows come as a run of up to
# four (session, day, week, month) that must go one after the other: to keep C calls busy the stage
# must see past C users' runs. At 2 per call a 100-user bench kept 11 of 16 calls busy at most.
HELD_PER_CALL = 8
RETRY_FIRST_S = 1.0  # a failed record's first retry; doubled each time up to RETRY_MAX_S
RETRY_MAX_S = 10.0


class KeyOrdered:
    def __init__(
        self, stage: str, limit: int, clock: Clock = time.time, sleep: Sleep = asyncio.sleep
    ) -> None:
        if limit < 1:
            raise ValueError("a stage must be able to hold one record")
        self.stage = stage
        self.limit = limit
        self.clock = clock
        self.sleep = sleep

    async def until_done(self, handle: Handle, event: EventT) -> None:
        delay = RETRY_FIRST_S
        while True:
            try:
                return await handle(event)
            except Exception:
                msg = event.message
                log.exception(
                    "%s: %s/%d failed; trying it again in %.0fs", self.stage, msg.topic, msg.offset, delay
                )
                metrics.CONSOLIDATION_ERRORS.labels(self.stage).inc()
            await self.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)

    async def run(self, events: AsyncIterable[EventT], handle: Handle, ack: Ack) -> None:
        order: KeyOrder[EventT] = KeyOrder()
        room = asyncio.Semaphore(self.limit)
        in_flight = metrics.CONSOLIDATION_IN_FLIGHT.labels(self.stage)
        queued = metrics.CONSOLIDATION_QUEUED.labels(self.stage)
        waited = metrics.CONSOLIDATION_QUEUE_WAIT.labels(self.stage)
        metrics.CONSOLIDATION_ERRORS.labels(self.stage)  # exported at 0 from the start

        async def work(entry: Entry[EventT] | None) -> None:
            # One task per user while the user has records: each is started as the one before it
            # finishes, so a user's records never overlap.
            while entry is not None:
                event = entry.item
                if (written := event.message.timestamp) is not None:
                    waited.observe(max(0.0, self.clock() - written))
                in_flight.inc()
                try:
                    await self.until_done(handle, event)
                finally:
                    in_flight.dec()
                finished = order.finish(entry)
                queued.set(order.waiting())
                for released in finished.released:
                    for copy in (released.item, *released.copies):
                        await ack(copy)
                    room.release()
                entry = finished.start

        records = aiter(events)
        async with asyncio.TaskGroup() as tasks:
            while True:
                await room.acquire()  # before the next record is taken: held <= limit
                try:
                    event = await anext(records)
                except StopAsyncIteration:
                    break
                msg = event.message
                taken = order.add(msg.partition, msg.offset, msg.key or b"", event)
                queued.set(order.waiting())
                if isinstance(taken, Entry):
                    tasks.create_task(work(taken))
                elif taken is not None:  # delivered again after a seek back: it holds no room
                    room.release()
                    if taken is Again.RELEASED:
                        await ack(event)  # done before; a held one is acknowledged with its first

"""Runs a consolidation stage's records concurrently across users and strictly in order per user
(memstream/core/key_order.py), acknowledging each record to faust only once it and every record
before it on its partition are done: faust commits acknowledged offsets, so a crash redelivers from
the first record not yet done and skips none.

At most ``limit`` records are held (taken and not yet acknowledged). At the limit the stage stops
reading its stream: faust's buffer for the stream fills and faust pauses fetching its partitions,
so a backlog waits in Kafka, not in memory. A handler that raises cancels the others and fails the
agent, as a handler's error did when records ran one at a time; unacknowledged records are
delivered again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, Awaitable, Callable

from faust.types import EventT

from memstream.adapters import metrics
from memstream.core.key_order import Again, Entry, KeyOrder

Handle = Callable[[EventT], Awaitable[None]]
Ack = Callable[[EventT], Awaitable[object]]
Clock = Callable[[], float]  # epoch seconds


class KeyOrdered:
    def __init__(self, stage: str, limit: int, clock: Clock = time.time) -> None:
        if limit < 1:
            raise ValueError("a stage must be able to hold one record")
        self.stage = stage
        self.limit = limit
        self.clock = clock

    async def run(self, events: AsyncIterable[EventT], handle: Handle, ack: Ack) -> None:
        order: KeyOrder[EventT] = KeyOrder()
        room = asyncio.Semaphore(self.limit)
        in_flight = metrics.CONSOLIDATION_IN_FLIGHT.labels(self.stage)
        waited = metrics.CONSOLIDATION_QUEUE_WAIT.labels(self.stage)

        async def work(entry: Entry[EventT] | None) -> None:
            # One task per user while the user has records: each is started as the one before it
            # finishes, so a user's records never overlap.
            while entry is not None:
                event = entry.item
                if (written := event.message.timestamp) is not None:
                    waited.observe(max(0.0, self.clock() - written))
                in_flight.inc()
                try:
                    await handle(event)
                finally:
                    in_flight.dec()
                finished = order.finish(entry)
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
                if isinstance(taken, Entry):
                    tasks.create_task(work(taken))
                elif taken is not None:  # delivered again after a seek back: it holds no room
                    room.release()
                    if taken is Again.RELEASED:
                        await ack(event)  # done before; a held one is acknowledged with its first

"""Live memory updates for server-sent events: one consumer of ``memory.updates`` and
``tombstones`` per gateway replica, fanned out to the subscribers of each user; and the replay of
what a reconnecting client missed.

No consumer group: every replica reads every partition from the end, so whichever replica a
client reaches sees its user's updates, and replicas stay independent (stateless). An update's
event id is its position in ``memory.updates`` (``<partition>-<offset>``): a user's updates are all
on one partition, in order, so a client that reconnects with ``Last-Event-ID`` is sent the user's
updates after that position, then the live ones, none twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import defaultdict
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from memstream.adapters import metrics
from memstream.adapters.kafka import client_kwargs
from memstream.adapters.settings import Settings
from memstream.schemas.events import Tombstone
from memstream.schemas.memory import MemoryUpdate
from memstream.schemas.topics import MEMORY_UPDATES, TOMBSTONES

log = logging.getLogger("memstream.gateway")
TOPIC_WAIT_S = 0.5  # between looks for the memory.updates topic before it exists
QUEUE_SIZE = 256  # updates buffered per subscriber; a client that falls this far behind is dropped
# How far back a reconnecting client is served: the records of its partition after its last event
# id, at most this many (they are every user's of that partition), and only as long as the topic
# keeps them. Further back, the stream opens with a `reset` event: read recall again.
RESUME_WINDOW = 10_000
RESUME_TIMEOUT_S = 10.0
_EVENT_ID = re.compile(r"^(\d{1,6})-(\d{1,19})$")


@dataclass(frozen=True)
class Event:
    """One server-sent event: ``memory`` (a MemoryUpdate, at its position), ``forgotten`` (the user's
    Tombstone: everything of theirs is gone) or ``reset`` (updates were missed: read recall again)."""

    kind: str
    data: bytes
    partition: int | None = None
    offset: int | None = None

    def encode(self) -> bytes:
        ident = b"" if self.offset is None else f"id: {self.partition}-{self.offset}\n".encode()
        return b"event: " + self.kind.encode() + b"\n" + ident + b"data: " + self.data + b"\n\n"


def position(last_event_id: str | None) -> tuple[int, int] | None:
    """``(partition, offset)`` of a Last-Event-ID this gateway sent; None for anything else."""
    found = _EVENT_ID.match(last_event_id or "")
    return (int(found[1]), int(found[2])) if found else None


class UpdateHub:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._subscribers: dict[str, set[asyncio.Queue[Event | None]]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def subscribe(self, user_key: str) -> asyncio.Queue[Event | None]:
        queue: asyncio.Queue[Event | None] = asyncio.Queue(QUEUE_SIZE)
        self._subscribers[user_key].add(queue)
        return queue

    def unsubscribe(self, user_key: str, queue: asyncio.Queue[Event | None]) -> None:
        subs = self._subscribers.get(user_key)
        if subs is not None:
            subs.discard(queue)
            if not subs:
                del self._subscribers[user_key]

    def publish(self, user_key: str, event: Event) -> None:
        for queue in list(self._subscribers.get(user_key, ())):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                # None tells the stream to end: the client reconnects with its Last-Event-ID.
                self.unsubscribe(user_key, queue)
                queue.get_nowait()
                queue.put_nowait(None)

    async def _run(self) -> None:
        topic = self._settings.kafka.topic(MEMORY_UPDATES.name)
        stones = self._settings.kafka.topic(TOMBSTONES.name)
        while True:
            consumer = AIOKafkaConsumer(**client_kwargs(self._settings), enable_auto_commit=False)
            try:
                await consumer.start()
                # Asking for a missing topic's offsets makes a broker that auto-creates topics create
                # it with *its* default partition count, not ours; so wait until the pipeline (`memstream
                # up`, `memstream topics`) has made it. Listing topics creates nothing.
                if not {topic, stones} <= await consumer.topics():
                    log.info("waiting for topics %s and %s to be created", topic, stones)
                    await asyncio.sleep(TOPIC_WAIT_S)
                    continue
                parts = [
                    TopicPartition(t, p)
                    for t in (topic, stones)
                    for p in range(self._settings.kafka.topic_partitions)
                ]
                consumer.assign(parts)
                await consumer.seek_to_end(*parts)
                # seek_to_end is lazy: resolve the positions now, so "ready" means "from here on".
                start = {f"{tp.topic}/{tp.partition}": await consumer.position(tp) for tp in parts}
                log.info("live updates from offsets %s", start)
                self.ready.set()
                while True:
                    batch = await consumer.getmany(timeout_ms=500)
                    for tp, records in batch.items():
                        for record in records:
                            if record.value is None:
                                continue
                            if tp.topic == topic:
                                metrics.GATEWAY_UPDATES.inc()
                                update = MemoryUpdate.from_bytes(record.value)
                                self.publish(
                                    update.key, Event("memory", record.value, tp.partition, record.offset)
                                )
                            else:
                                self.publish(
                                    Tombstone.from_bytes(record.value).key, Event("forgotten", record.value)
                                )
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("memory.updates consumer failed; reconnecting")
                self.ready.clear()
                await asyncio.sleep(1.0)
            finally:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await consumer.stop()

    async def missed(self, user_key: str, after: tuple[int, int]) -> tuple[list[Event], int, int]:
        """The user's updates after ``after`` (partition, offset) up to the partition's end now:
        (events, partition, end). Events start with a ``reset`` when that is further back than
        the topic keeps or than RESUME_WINDOW records."""
        partition, offset = after
        tp = TopicPartition(self._settings.kafka.topic(MEMORY_UPDATES.name), partition)
        consumer = AIOKafkaConsumer(**client_kwargs(self._settings), enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([tp])
            begin = (await consumer.beginning_offsets([tp]))[tp]
            end = (await consumer.end_offsets([tp]))[tp]
            events: list[Event] = []
            first = offset + 1
            if first < begin or end - first > RESUME_WINDOW:
                events.append(Event("reset", b"{}"))
                first = max(begin, end - RESUME_WINDOW)
            consumer.seek(tp, first)
            try:
                async with asyncio.timeout(RESUME_TIMEOUT_S):
                    while first < end and await consumer.position(tp) < end:
                        for record in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                            if record.offset < end and _of_user(record.value, user_key):
                                events.append(Event("memory", record.value, partition, record.offset))
            except TimeoutError:
                events.insert(0, Event("reset", b"{}"))
            return events, partition, end
        finally:
            await consumer.stop()


def _of_user(value: bytes | None, user_key: str) -> bool:
    return value is not None and MemoryUpdate.from_bytes(value).key == user_key

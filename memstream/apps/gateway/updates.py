"""Live memory updates for server-sent events: one consumer of ``memory.updates`` per gateway
replica, fanned out to the subscribers of each user.

No consumer group: every replica reads every partition from the end, so whichever replica a
client reaches sees its user's updates, and replicas stay independent (stateless).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict

from aiokafka import AIOKafkaConsumer, TopicPartition

from memstream.adapters import metrics
from memstream.adapters.kafka import client_kwargs
from memstream.adapters.settings import Settings
from schemas.memory import MemoryUpdate
from schemas.topics import MEMORY_UPDATES

log = logging.getLogger("memstream.gateway")
TOPIC_WAIT_S = 0.5  # between looks for the memory.updates topic before it exists
QUEUE_SIZE = 256  # updates buffered per subscriber; a client that falls this far behind is dropped


class UpdateHub:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._subscribers: dict[str, set[asyncio.Queue[MemoryUpdate | None]]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def subscribe(self, user_key: str) -> asyncio.Queue[MemoryUpdate | None]:
        queue: asyncio.Queue[MemoryUpdate | None] = asyncio.Queue(QUEUE_SIZE)
        self._subscribers[user_key].add(queue)
        return queue

    def unsubscribe(self, user_key: str, queue: asyncio.Queue[MemoryUpdate | None]) -> None:
        subs = self._subscribers.get(user_key)
        if subs is not None:
            subs.discard(queue)
            if not subs:
                del self._subscribers[user_key]

    def publish(self, update: MemoryUpdate) -> None:
        for queue in list(self._subscribers.get(update.key, ())):
            try:
                queue.put_nowait(update)
            except asyncio.QueueFull:
                # None tells the stream to end: the client reconnects and reads recall again.
                self.unsubscribe(update.key, queue)
                queue.get_nowait()
                queue.put_nowait(None)

    async def _run(self) -> None:
        topic = self._settings.topic(MEMORY_UPDATES.name)
        while True:
            consumer = AIOKafkaConsumer(**client_kwargs(self._settings), enable_auto_commit=False)
            try:
                await consumer.start()
                # Asking for a missing topic's offsets makes a broker that auto-creates topics create
                # it with *its* default partition count, not ours; so wait until the pipeline (`memstream
                # up`, `memstream topics`) has made it. Listing topics creates nothing.
                if topic not in await consumer.topics():
                    log.info("waiting for topic %s to be created", topic)
                    await asyncio.sleep(TOPIC_WAIT_S)
                    continue
                parts = [TopicPartition(topic, p) for p in range(self._settings.topic_partitions)]
                consumer.assign(parts)
                await consumer.seek_to_end(*parts)
                # seek_to_end is lazy: resolve the positions now, so "ready" means "from here on".
                start = {tp.partition: await consumer.position(tp) for tp in parts}
                log.info("live updates from %s at offsets %s", topic, start)
                self.ready.set()
                while True:
                    batch = await consumer.getmany(timeout_ms=500)
                    for records in batch.values():
                        for record in records:
                            if record.value is not None:
                                metrics.GATEWAY_UPDATES.inc()
                                self.publish(MemoryUpdate.from_bytes(record.value))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("memory.updates consumer failed; reconnecting")
                self.ready.clear()
                await asyncio.sleep(1.0)
            finally:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await consumer.stop()

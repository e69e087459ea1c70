"""Small aiokafka adapters: topic creation, producing turns, and reading group progress.

Progress is measured against the offsets our own sends returned and the group's committed
offsets (``consumer.committed()``), never ``end_offsets``: Tansu, the test broker, reports
wrong end offsets for multi-record batches, and committed offsets are what "processed" means.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.partitioner import murmur2

from memstream.settings import Settings
from schemas.topics import ALL_TOPICS, CONSOLIDATION, DEFERRED, MEMORY_UPDATES, WINDOWS


def partition_for(key: bytes, partitions: int) -> int:
    """The partition the default partitioner (Java's and aiokafka's) gives ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


async def ensure_topics(settings: Settings) -> None:
    """Create every pipeline topic with the configured partitions; existing topics are kept."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.brokers)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(
                settings.topic(spec.name), num_partitions=settings.topic_partitions, replication_factor=1
            )
            for spec in ALL_TOPICS
            if settings.topic(spec.name) not in existing
        ]
        if missing:
            with suppress(TopicAlreadyExistsError):  # another process won the race
                await admin.create_topics(missing)
    finally:
        await admin.close()


@asynccontextmanager
async def producer(settings: Settings) -> AsyncIterator[AIOKafkaProducer]:
    p = AIOKafkaProducer(
        bootstrap_servers=settings.brokers,
        acks="all",
        linger_ms=5,
        max_batch_size=256 * 1024,
        request_timeout_ms=30_000,
    )
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


async def wait_processed(
    settings: Settings, topic: str, produced: Mapping[int, int], timeout: float, poll: float = 0.2
) -> bool:
    """Wait until the pipeline's consumer group has committed past ``produced`` (partition ->
    last offset sent). Committed offsets are read with ``consumer.committed()``, which asks the
    group coordinator each time (admin offset listing fails against Tansu)."""
    async with group_offsets(settings) as consumer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            done = [await consumer.committed(TopicPartition(topic, p)) for p in produced]
            if all(off is not None and off > last for off, last in zip(done, produced.values(), strict=True)):
                return True
            await asyncio.sleep(poll)
        return False


@asynccontextmanager
async def group_offsets(settings: Settings) -> AsyncIterator[AIOKafkaConsumer]:
    """A consumer in the pipeline's group that subscribes to nothing (so it never joins or
    rebalances the group): for reading the group's committed offsets."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.brokers, group_id=settings.app_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()


async def read_topic(settings: Settings, topic: str, idle_s: float = 1.0) -> list[tuple[bytes | None, bytes]]:
    """Every record of ``topic`` from the beginning, until ``idle_s`` passes without one."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=settings.brokers, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        out: list[tuple[bytes | None, bytes]] = []
        while True:
            batch = await consumer.getmany(timeout_ms=int(idle_s * 1000))
            if not batch:
                return out
            for msgs in batch.values():
                out.extend((m.key, m.value) for m in msgs if m.value is not None)
    finally:
        await consumer.stop()


async def consumed(settings: Settings, topics: list[str]) -> bool:
    """Whether the pipeline's group has committed every record of ``topics``. Only for topics the
    pipeline itself produces: against Tansu it sends one record per batch, so end offsets hold."""
    async with group_offsets(settings) as consumer:
        tps = [TopicPartition(t, p) for t in topics for p in range(settings.topic_partitions)]
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            if ends[tp] and (await consumer.committed(tp) or 0) < ends[tp]:
                return False
        return True


async def settled(settings: Settings) -> bool:
    """Whether consolidation has nothing left in flight: every record of the topics after ingest
    committed, twice in a row (work in flight publishes into the next topic in between)."""
    topics = [settings.topic(spec.name) for spec in (CONSOLIDATION, WINDOWS, DEFERRED, MEMORY_UPDATES)]
    return await consumed(settings, topics) and await consumed(settings, topics)

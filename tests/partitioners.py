"""aiokafka partitioners with the arithmetic of other clients' defaults, for producing turns the
way a platform's own services would: librdkafka's ``consistent_random`` (confluent-kafka, kcat, the
Go and Node clients) and Sarama's hash partitioner (FNV-1a). Keyless records go anywhere, as there."""

from __future__ import annotations

import asyncio
import random
import zlib
from collections.abc import Callable, Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata

from memstream.adapters.kafka import client_kwargs
from memstream.adapters.settings import Settings
from schemas.events import Turn
from schemas.topics import TURNS

Partitioner = Callable[[bytes | None, list[int], list[int]], int]


def fnv1a_32(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def librdkafka_consistent(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    """librdkafka's ``consistent_random``: CRC32 of the key (unsigned) modulo the partition count."""
    if key is None:
        return random.choice(available or all_partitions)
    return all_partitions[zlib.crc32(key) % len(all_partitions)]


def sarama_hash(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    """Sarama's ``NewHashPartitioner``: FNV-1a as an int32, Go's truncated ``%``, then negated
    when negative (so the absolute value modulo the count)."""
    if key is None:
        return random.choice(available or all_partitions)
    h = fnv1a_32(key)
    signed = h - (1 << 32) if h & 0x80000000 else h
    return all_partitions[abs(signed) % len(all_partitions)]


async def produce(
    settings: Settings, turns: Sequence[Turn], partitioner: Partitioner
) -> list[RecordMetadata]:
    """Send ``turns`` to the turns topic keyed tenant/user_id, placed by ``partitioner``, as another
    client would (acks=all); where each landed."""
    client = AIOKafkaProducer(**client_kwargs(settings), partitioner=partitioner, acks="all")
    await client.start()
    try:
        topic = settings.topic(TURNS.name)
        sent = [await client.send(topic, t.to_bytes(), key=t.key.encode()) for t in turns]
        return list(await asyncio.gather(*sent))
    finally:
        await client.stop()

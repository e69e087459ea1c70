"""aiokafka partitioners with the arithmetic of other clients' defaults, for producing turns the
way a platform's own services would: librdkafka's ``consistent_random`` (confluent-kafka, kcat, the
Go and Node clients) and Sarama's hash partitioner (FNV-1a). Keyless records go anywhere, as there.
And the real confluent-kafka producer and Kafka's own console producer, for Apache Kafka
(``produce_with_confluent``, ``produce_with_console``)."""

from __future__ import annotations

import asyncio
import random
import subprocess
import zlib
from collections.abc import Callable, Sequence

import confluent_kafka
from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata

from memstream.adapters.kafka import client_kwargs, read_records
from memstream.adapters.kafka_server import KafkaServer, java_binary, kafka_libs
from memstream.adapters.settings import Settings
from memstream.schemas.events import Turn
from memstream.schemas.topics import TURNS

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
        topic = settings.kafka.topic(TURNS.name)
        sent = [await client.send(topic, t.to_bytes(), key=t.key.encode()) for t in turns]
        return list(await asyncio.gather(*sent))
    finally:
        await client.stop()


def produce_with_confluent(settings: Settings, turns: Sequence[Turn]) -> list[int]:
    """Send ``turns`` keyed tenant/user_id with confluent-kafka's Producer and its default
    partitioner (librdkafka's ``consistent_random``), idempotent, acks=all; the partition each
    landed on, in the turns' order."""
    client = confluent_kafka.Producer(
        {"bootstrap.servers": settings.kafka.brokers, "enable.idempotence": True}
    )
    landed: dict[int, int | None] = {}
    failed: list[str] = []

    def on_delivery(i: int) -> Callable[[confluent_kafka.KafkaError | None, confluent_kafka.Message], None]:
        def delivered(err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
            landed[i] = msg.partition()
            if err is not None:
                failed.append(str(err))

        return delivered

    topic = settings.kafka.topic(TURNS.name)
    for i, t in enumerate(turns):
        client.produce(topic, t.to_bytes(), key=t.key.encode(), on_delivery=on_delivery(i))
    unsent = client.flush(60)
    assert not unsent and not failed, f"{unsent} turns not delivered in 60 s; errors: {failed[:3]}"
    return [p for _, p in sorted(landed.items()) if p is not None]


def produce_with_console(server: KafkaServer, settings: Settings, turns: Sequence[Turn]) -> list[int]:
    """Send ``turns`` with Kafka's console producer as the README shows it (one ``key<TAB>json``
    line per turn, ``parse.key=true``, acks=all); the partition each landed on, in the turns' order,
    read back from the topic (each turn must be there once: nothing was forwarded yet)."""
    topic = settings.kafka.topic(TURNS.name)
    command = [
        str(java_binary()),
        "-cp",
        f"{kafka_libs(server.libs)}/*",
        "org.apache.kafka.tools.ConsoleProducer",
        "--bootstrap-server",
        settings.kafka.brokers,
        "--topic",
        topic,
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=\t",
        "--producer-property",
        "acks=all",
    ]
    lines = b"".join(t.key.encode() + b"\t" + t.to_bytes() + b"\n" for t in turns)
    done = subprocess.run(command, input=lines, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    where: dict[str, list[int]] = {}
    for m in asyncio.run(read_records(settings, topic)):
        where.setdefault(Turn.from_bytes(m.value).turn_id, []).append(m.partition)
    assert all(len(ps) == 1 for ps in where.values()), "a turn is in the topic twice"
    return [where[t.turn_id][0] for t in turns]

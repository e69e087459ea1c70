"""Small aiokafka adapters: topic creation, producing turns, and reading group progress.

Progress is measured against the offsets our own sends returned and the group's committed
offsets (``consumer.committed()``), or log ends as fetches report them, never ``end_offsets``:
Tansu, the test broker, reports wrong end offsets for multi-record batches, and committed offsets
are what "processed" means.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import CoordinatorNotAvailableError, TopicAlreadyExistsError
from aiokafka.helpers import create_ssl_context
from aiokafka.partitioner import murmur2

from memstream.adapters.settings import Settings
from memstream.schemas.topics import ALL_TOPICS, CONSOLIDATION, DEFERRED, MEMORY_UPDATES, WINDOWS

log = logging.getLogger(__name__)
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs config_source of a value set on the topic itself


def ssl_context(settings: Settings) -> ssl.SSLContext:
    """TLS context for the brokers: the configured CA (or the system's), and a client certificate
    for mutual TLS when one is configured."""
    return create_ssl_context(
        cafile=str(settings.kafka.kafka_ssl_cafile) if settings.kafka.kafka_ssl_cafile else None,
        certfile=str(settings.kafka.kafka_ssl_certfile) if settings.kafka.kafka_ssl_certfile else None,
        keyfile=str(settings.kafka.kafka_ssl_keyfile) if settings.kafka.kafka_ssl_keyfile else None,
    )


def security_kwargs(settings: Settings) -> dict[str, Any]:
    """aiokafka's security arguments for the configured protocol (none for PLAINTEXT)."""
    protocol = settings.kafka.kafka_security_protocol
    if protocol == "PLAINTEXT":
        return {}
    out: dict[str, Any] = {"security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        out["ssl_context"] = ssl_context(settings)
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        assert settings.kafka.kafka_sasl_password is not None  # the settings refuse SASL without one
        out.update(
            sasl_mechanism=settings.kafka.kafka_sasl_mechanism,
            sasl_plain_username=settings.kafka.kafka_sasl_username,
            sasl_plain_password=settings.kafka.kafka_sasl_password.get_secret_value(),
        )
    return out


def client_kwargs(settings: Settings) -> dict[str, Any]:
    """Bootstrap servers and security arguments shared by every aiokafka client."""
    return {"bootstrap_servers": settings.kafka.brokers, **security_kwargs(settings)}


@lru_cache(maxsize=1 << 16)
def partition_for(key: bytes, partitions: int) -> int:
    """The partition a user's records belong on: murmur2 of the ``tenant/user_id`` key, as Java's
    and aiokafka's default partitioners place keyed records. Turns that arrive elsewhere are
    forwarded here (``memstream.streams.routing``), and the user's store shard is this partition's.
    Cached: aiokafka's murmur2 is pure Python (~2.7 us a key), asked for every turn ingested and
    every record produced, and a user's key recurs."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def by_key(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    """aiokafka partitioner for every producer of ours: :func:`partition_for`, stated rather than
    left to the client's default, so no client upgrade can move a user. Keyless records (none of
    ours) go to any partition."""
    if key is None:
        return random.choice(available or all_partitions)
    return all_partitions[partition_for(key, len(all_partitions))]


@dataclass
class TopicsReport:
    """What :func:`ensure_topics` found and did."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    retention_updated: list[str] = field(default_factory=list)
    # existing topics whose partition count is not MEMSTREAM_TOPIC_PARTITIONS: name -> count
    wrong_partitions: dict[str, int] = field(default_factory=dict)


async def ensure_topics(settings: Settings, update_existing: bool = False) -> TopicsReport:
    """Create every pipeline topic that is missing, with the configured partitions, replication
    factor and retention. Existing topics are kept; with ``update_existing`` their retention is
    set where it differs from ``topic_retention_ms`` and their partition counts are checked
    (never changed: a user's records and state stay on the partition their key hashes to)."""
    report = TopicsReport()
    retention = {settings.kafka.topic(name): ms for name, ms in settings.kafka.topic_retention_ms.items()}
    admin = AIOKafkaAdminClient(**client_kwargs(settings))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        names = [settings.kafka.topic(spec.name) for spec in ALL_TOPICS]
        missing = [
            NewTopic(
                name,
                num_partitions=settings.kafka.topic_partitions,
                replication_factor=settings.kafka.topic_replication_factor,
                topic_configs={"retention.ms": str(retention[name])} if name in retention else {},
            )
            for name in names
            if name not in existing
        ]
        if missing:
            with suppress(TopicAlreadyExistsError):  # another process won the race
                await admin.create_topics(missing)
        report.created = [t.name for t in missing]
        report.existing = [name for name in names if name in existing]
        if update_existing and report.existing:
            for topic in await admin.describe_topics(report.existing):
                if len(topic["partitions"]) != settings.kafka.topic_partitions:
                    report.wrong_partitions[topic["topic"]] = len(topic["partitions"])
            stale = [name for name in report.existing if name in retention]
            if stale:
                report.retention_updated = await _set_retention(admin, stale, retention)
    finally:
        await admin.close()
    return report


async def wait_group_coordinator(settings: Settings, timeout: float = 60.0) -> float:
    """Wait until the broker names a coordinator for the pipeline's group; the seconds it took.
    A fresh Kafka cluster answers COORDINATOR_NOT_AVAILABLE until it has created
    ``__consumer_offsets`` (a few seconds, measured), which the group's first join would otherwise meet."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    admin = AIOKafkaAdminClient(**client_kwargs(settings))
    await admin.start()
    try:
        while True:
            try:
                await admin.find_coordinator(settings.kafka.app_id)
                return loop.time() - start
            except CoordinatorNotAvailableError:
                if loop.time() - start > timeout:
                    raise
                await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def _set_retention(
    admin: AIOKafkaAdminClient, names: list[str], retention: Mapping[str, int]
) -> list[str]:
    """Set ``retention.ms`` on the topics where it differs; the names changed."""
    changes = []
    for name, entries in (await _described(admin, names)).items():
        current = entries.get("retention.ms", {}).get("config_value")
        if current == str(retention[name]):
            continue
        changes.append(_keeping_dynamic(name, entries, {"retention.ms": str(retention[name])}))
        log.info("retention.ms of %s: %s -> %s", name, current, retention[name])
    await _alter(admin, changes)
    return [c.name for c in changes]


async def set_topic_configs(settings: Settings, topic: str, configs: Mapping[str, str]) -> None:
    """Set ``configs`` on ``topic``, keeping its other dynamic values."""
    admin = AIOKafkaAdminClient(**client_kwargs(settings))
    await admin.start()
    try:
        entries = (await _described(admin, [topic]))[topic]
        await _alter(admin, [_keeping_dynamic(topic, entries, configs)])
    finally:
        await admin.close()


async def topic_configs(settings: Settings, names: list[str]) -> dict[str, dict[str, str | None]]:
    """Each topic's configs, name to value."""
    admin = AIOKafkaAdminClient(**client_kwargs(settings))
    await admin.start()
    try:
        described = await _described(admin, names)
    finally:
        await admin.close()
    return {topic: {k: e["config_value"] for k, e in entries.items()} for topic, entries in described.items()}


async def _described(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each topic's config entries by name."""
    described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names])
    resources = [r for response in described for r in response.to_object()["resources"]]
    for r in resources:
        if r["error_code"]:  # e.g. a topic just created that this broker does not know yet
            raise RuntimeError(
                f"describing the configs of {r['resource_name']} failed: "
                f"error {r['error_code']} {r['error_message']}"
            )
    return {r["resource_name"]: {e["config_names"]: e for e in r["config_entries"]} for r in resources}


def _keeping_dynamic(
    name: str, entries: Mapping[str, Mapping[str, Any]], configs: Mapping[str, str]
) -> ConfigResource:
    """AlterConfigs replaces a topic's whole dynamic config, so its other dynamic values go too."""
    keep = {
        k: e["config_value"]
        for k, e in entries.items()
        if e.get("config_source") == DYNAMIC_TOPIC_CONFIG
        and not e["read_only"]
        and not e["is_sensitive"]
        and e["config_value"] is not None
    }
    return ConfigResource(ConfigResourceType.TOPIC, name, configs={**keep, **configs})


async def _alter(admin: AIOKafkaAdminClient, changes: list[ConfigResource]) -> None:
    if not changes:
        return
    for response in await admin.alter_configs(changes):
        for r in response.to_object()["resources"]:
            if r["error_code"]:
                raise RuntimeError(
                    f"setting the configs of {r['resource_name']} failed: "
                    f"error {r['error_code']} {r['error_message']}"
                )


async def track_topics(client: AIOKafkaProducer, topics: Iterable[str]) -> None:
    """Keep ``topics`` in every metadata request ``client`` makes, and wait until it knows them.
    Once an aiokafka client tracks any topic, its metadata requests name those alone, and the answer
    replaces what it knew; ``partitions_for`` does not track a topic found in an earlier all-topics
    answer, so that topic drops out at the next refresh (on Kafka and Tansu alike)."""
    for topic in topics:
        await client.client.add_topic(topic)
        await client.partitions_for(topic)


@asynccontextmanager
async def producer(settings: Settings) -> AsyncIterator[AIOKafkaProducer]:
    p = AIOKafkaProducer(
        **client_kwargs(settings),
        partitioner=by_key,
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
        **client_kwargs(settings), group_id=settings.kafka.app_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()


async def read_records(settings: Settings, topic: str, idle_s: float = 1.0) -> list[ConsumerRecord[Any, Any]]:
    """Every record of ``topic`` from the beginning (with its partition and offset), until
    ``idle_s`` passes without one."""
    consumer = AIOKafkaConsumer(
        topic, **client_kwargs(settings), auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        out: list[ConsumerRecord[Any, Any]] = []
        while batch := await consumer.getmany(timeout_ms=int(idle_s * 1000)):
            for msgs in batch.values():
                out.extend(msgs)
        return out
    finally:
        await consumer.stop()


async def read_topic(settings: Settings, topic: str, idle_s: float = 1.0) -> list[tuple[bytes | None, bytes]]:
    """The key and value of every record of ``topic`` (see :func:`read_records`)."""
    return [(m.key, m.value) for m in await read_records(settings, topic, idle_s) if m.value is not None]


async def consumed(settings: Settings, topics: list[str]) -> bool:
    """Whether the pipeline's group has committed every record of ``topics``."""
    tps = [TopicPartition(t, p) for t in topics for p in range(settings.kafka.topic_partitions)]
    async with group_offsets(settings) as group:
        committed = {tp: await group.committed(tp) or 0 for tp in tps}
    ends = await log_ends(settings, committed)
    return all(committed[tp] >= ends[tp] for tp in tps)


async def log_ends(
    settings: Settings, start: Mapping[TopicPartition, int], timeout: float = 30.0
) -> dict[TopicPartition, int]:
    """Each partition's log end (high watermark) as a fetch from ``start`` reports it. Not
    ``end_offsets``: Tansu answers those with the last batch's first offset + 1, which is short of
    the end wherever that batch holds several records (as the pipeline's producers send)."""
    consumer = AIOKafkaConsumer(**client_kwargs(settings), enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    try:
        consumer.assign(list(start))
        for tp, offset in start.items():
            consumer.seek(tp, offset)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (missing := [tp for tp in start if consumer.highwater(tp) is None]) and loop.time() < deadline:
            await consumer.getmany(*missing, timeout_ms=100, max_records=1)
        if missing:
            raise TimeoutError(f"no fetch answered for {missing} in {timeout:.0f} s")
        return {tp: consumer.highwater(tp) for tp in start}
    finally:
        await consumer.stop()


async def settled(settings: Settings) -> bool:
    """Whether consolidation has nothing left in flight: every record of the topics after ingest
    committed, twice in a row (work in flight publishes into the next topic in between)."""
    topics = [settings.kafka.topic(spec.name) for spec in (CONSOLIDATION, WINDOWS, DEFERRED, MEMORY_UPDATES)]
    return await consumed(settings, topics) and await consumed(settings, topics)


async def unconsumed(settings: Settings, topic: str, idle_s: float = 0.2) -> int:
    """How many records of ``topic`` the pipeline's group has not committed, counted by reading
    them from the committed offsets on: end offsets cannot say, since Tansu reports the end of a
    multi-record batch (as the gateway's producer sends) as its first offset + 1."""
    async with group_offsets(settings) as group:
        tps = [TopicPartition(topic, p) for p in range(settings.kafka.topic_partitions)]
        start = {tp: await group.committed(tp) or 0 for tp in tps}
    consumer = AIOKafkaConsumer(
        **client_kwargs(settings), auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(tps)
        for tp, offset in start.items():
            consumer.seek(tp, offset)
        count = 0
        while batch := await consumer.getmany(timeout_ms=int(idle_s * 1000)):
            count += sum(len(msgs) for msgs in batch.values())
        return count
    finally:
        await consumer.stop()

"""Progress against the log's end as fetches report it (adapters/kafka.py ``log_ends``), on both
brokers: Tansu answers ``end_offsets`` with the last batch's first offset + 1, so a topic written in
multi-record batches (as the pipeline's records producer writes on Tansu, streams/worker.py) must
still count as unconsumed until its last record is committed."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from memstream.adapters.kafka import client_kwargs, consumed, ensure_topics, log_ends
from memstream.adapters.settings import KafkaSettings, Settings
from memstream.streams.worker import RECORDS_MAX_BATCH_BYTES, _faust_app, _records_producer
from tests.conftest import AnyBroker


@pytest.mark.integration
async def test_a_multi_record_batch_is_consumed_only_once_its_last_record_is_committed(
    broker: AnyBroker,
) -> None:
    settings = Settings(
        kafka=KafkaSettings(bootstrap_servers=broker.bootstrap, topic_prefix=f"e{uuid.uuid4().hex[:8]}.")
    )
    topic = settings.kafka.topic("windows")
    await ensure_topics(settings)
    producer = AIOKafkaProducer(**client_kwargs(settings), linger_ms=200)  # one batch of five
    await producer.start()
    try:
        sent = await asyncio.gather(
            *[await producer.send(topic, b"v", key=b"k", partition=0) for _ in range(5)]
        )
    finally:
        await producer.stop()
    assert len({m.offset for m in sent}) == 5
    tp = TopicPartition(topic, 0)
    start = {TopicPartition(topic, p): 0 for p in range(settings.kafka.topic_partitions)}
    assert (await log_ends(settings, start))[tp] == 5
    assert not await consumed(settings, [topic])

    group = AIOKafkaConsumer(
        **client_kwargs(settings), group_id=settings.kafka.app_id, enable_auto_commit=False
    )
    await group.start()
    try:
        group.assign([tp])
        await group.commit({tp: 4})
        assert not await consumed(settings, [topic])  # one record left
        await group.commit({tp: 5})
    finally:
        await group.stop()
    assert await consumed(settings, [topic])


def test_on_tansu_the_pipelines_records_are_batched_while_the_tables_changelogs_are_not() -> None:
    tansu = Settings(kafka=KafkaSettings(tansu_quirks=True))
    app = _faust_app(tansu)
    records = _records_producer(app, tansu)
    assert app.producer.max_batch_size == 1  # changelogs: end offsets faust's recovery can trust
    assert records is not app.producer and records.max_batch_size == RECORDS_MAX_BATCH_BYTES
    assert records in app._children  # started and stopped with the app

    kafka = Settings()
    app = _faust_app(kafka)
    assert _records_producer(app, kafka) is app.producer

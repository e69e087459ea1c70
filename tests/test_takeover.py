"""Taking a partition over (streams/read_your_writes.py) against the real Tansu broker: the first
consolidation on a newly assigned partition waits until the group has committed every
memory.updates record that partition held then, is handed on when the worker rebalances or stops
meanwhile, and gives up after its timeout."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from memstream.adapters import metrics
from memstream.adapters.broker import Broker
from memstream.adapters.kafka import client_kwargs, ensure_topics, producer
from memstream.adapters.settings import Settings
from memstream.schemas.topics import MEMORY_UPDATES
from memstream.streams.read_your_writes import Interrupted, Takeover
from tests.conftest import make_pipeline

pytestmark = pytest.mark.integration


async def send(settings: Settings, topic: str, partition: int, n: int) -> None:
    async with producer(settings) as p:
        # one record per batch (Tansu's end offsets: docs/configuration.md, "Tansu")
        for i in range(n):
            await (await p.send(topic, b"update %d" % i, key=b"k", partition=partition))


async def commit(settings: Settings, tp: TopicPartition, offset: int) -> None:
    """What the index role does once it has applied the records before ``offset``."""
    consumer = AIOKafkaConsumer(
        **client_kwargs(settings), group_id=settings.kafka.app_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.commit({tp: offset})
    finally:
        await consumer.stop()


@pytest.fixture
def settings(broker: Broker, tmp_path: Path) -> Settings:
    settings = make_pipeline(broker, tmp_path).settings
    asyncio.run(ensure_topics(settings))
    return settings


def test_the_first_work_on_a_partition_waits_until_its_updates_are_indexed(settings: Settings) -> None:
    topic = settings.kafka.topic(MEMORY_UPDATES.name)
    tp = TopicPartition(topic, 1)
    takeover = Takeover(settings, topic, timeout_s=60, poll_s=0.05)

    async def run() -> None:
        await send(settings, topic, 1, 3)  # published by the previous owner, not yet indexed
        takeover.assigned([0, 1])
        await asyncio.wait_for(takeover.ready(0, lambda: False), 10)  # nothing published on 0
        assert takeover.unchecked() == {1}
        waiting = asyncio.ensure_future(takeover.ready(1, lambda: False))
        await asyncio.sleep(1.5)
        assert not waiting.done()
        await commit(settings, tp, 2)  # one record still to apply
        await asyncio.sleep(1.0)
        assert not waiting.done()
        await commit(settings, tp, 3)
        await asyncio.wait_for(waiting, 10)
        assert takeover.unchecked() == set()
        await asyncio.wait_for(takeover.ready(1, lambda: False), 1)  # checked once per assignment

    asyncio.run(run())


def test_a_rebalance_or_stop_meanwhile_hands_the_work_on_and_a_new_assignment_checks_again(
    settings: Settings,
) -> None:
    topic = settings.kafka.topic(MEMORY_UPDATES.name)
    takeover = Takeover(settings, topic, timeout_s=60, poll_s=0.05)

    async def run() -> None:
        await send(settings, topic, 0, 2)
        takeover.assigned([0])
        with pytest.raises(Interrupted, match="not indexed up to 2 yet"):
            await asyncio.wait_for(takeover.ready(0, lambda: True), 10)
        assert takeover.unchecked() == {0}  # still to check, next time
        await commit(settings, TopicPartition(topic, 0), 2)
        await asyncio.wait_for(takeover.ready(0, lambda: True), 10)  # indexed: nothing to hand on
        assert takeover.unchecked() == set()
        takeover.assigned([0, 1])
        assert takeover.unchecked() == {0, 1}

    asyncio.run(run())


def test_it_stops_waiting_after_the_timeout_and_counts_it(settings: Settings) -> None:
    topic = settings.kafka.topic(MEMORY_UPDATES.name)
    takeover = Takeover(settings, topic, timeout_s=1.0, poll_s=0.05)
    before = metrics.TAKEOVER_TIMEOUTS._value.get()

    async def run() -> float:
        await send(settings, topic, 1, 1)  # never indexed: the index role is down
        takeover.assigned([1])
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.wait_for(takeover.ready(1, lambda: False), 10)
        return loop.time() - start

    waited = asyncio.run(run())
    assert 1.0 <= waited < 5
    assert metrics.TAKEOVER_TIMEOUTS._value.get() == before + 1
    assert takeover.unchecked() == set()  # given up on: the next work goes on

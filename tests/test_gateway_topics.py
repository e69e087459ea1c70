"""The gateway's live-updates consumer never creates ``memory.updates``: a gateway started before the
pipeline must not leave the topic with the broker's default partition count instead of ours (a user's
memory updates would then be indexed on another partition than their consolidation runs on)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from memstream.adapters.broker import Broker
from memstream.adapters.kafka import client_kwargs, ensure_topics
from memstream.adapters.settings import KafkaSettings, Settings
from memstream.apps.gateway.updates import UpdateHub
from memstream.schemas.topics import MEMORY_UPDATES

pytestmark = pytest.mark.integration


async def _partitions(settings: Settings, topic: str) -> int | None:
    admin = AIOKafkaAdminClient(**client_kwargs(settings))
    await admin.start()
    try:
        if topic not in await admin.list_topics():
            return None
        [described] = await admin.describe_topics([topic])
        return len(described["partitions"])
    finally:
        await admin.close()


async def _hub_waits_for_the_topic(settings: Settings) -> tuple[bool, int | None, float, int | None]:
    topic = settings.kafka.topic(MEMORY_UPDATES.name)
    hub = UpdateHub(settings)
    await hub.start()
    try:
        await asyncio.sleep(3.0)  # several looks for the topic
        ready_before, before = hub.ready.is_set(), await _partitions(settings, topic)
        await ensure_topics(settings)
        started = time.monotonic()
        await asyncio.wait_for(hub.ready.wait(), 30)
        return ready_before, before, time.monotonic() - started, await _partitions(settings, topic)
    finally:
        await hub.stop()


def test_a_gateway_started_before_the_pipeline_waits_for_its_topic(broker: Broker) -> None:
    settings = Settings(
        kafka=KafkaSettings(
            bootstrap_servers=broker.bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:8]}.", topic_partitions=2
        )
    )
    ready_before, before, waited, after = asyncio.run(_hub_waits_for_the_topic(settings))
    assert not ready_before and before is None  # not ready, and nothing created
    assert after == 2  # created by the pipeline, with the configured partitions
    assert waited < 30

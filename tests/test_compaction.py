"""The tables' changelogs under Apache Kafka's log compaction (issue 28).

A worker's per-user state (open windows, summary trees, forgotten users) lives in faust tables whose
changelogs are compacted topics: on a fresh disk, or one older than ``MEMSTREAM_TABLE_STALE_AFTER_S``,
the worker reads its state back from them. Here a real pipeline on Kafka gets small segments and a
short ``delete.retention.ms`` on its window-state changelog, so the log cleaner runs while the test
watches: each user's state is kept as its last value, and a forgotten user's tombstone is dropped
once ``delete.retention.ms`` has passed, which is why the stale-directory rule must stay below the
changelogs' ``delete.retention.ms``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from memstream.adapters.broker import free_port
from memstream.adapters.kafka import (
    client_kwargs,
    ensure_topics,
    read_records,
    set_topic_configs,
    topic_configs,
)
from memstream.adapters.kafka_server import KafkaServer
from memstream.adapters.settings import KafkaSettings, Settings
from memstream.apps.datasets import RawRecord
from memstream.apps.replay import replay
from memstream.apps.sample_conversations import generate
from memstream.schemas.events import Turn
from tests.conftest import AnyBroker, make_pipeline, ready, wait_for
from tests.test_faults import status_or_none

# Small enough that the cleaner runs within the test: a segment rolls at the first write 200 ms after
# it opened, and a tombstone outlives its cleaning by 2 s.
FAST_COMPACTION = {
    "segment.ms": "200",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "2000",
}


@pytest.mark.integration
def test_a_changelog_compacts_to_each_users_last_state_and_drops_a_forgotten_users(
    broker: AnyBroker, tmp_path: Path
) -> None:
    if not isinstance(broker, KafkaServer):
        pytest.skip("log compaction is checked on Apache Kafka (MEMSTREAM_TEST_BROKERS=kafka)")
    port = free_port()
    pipeline = make_pipeline(
        broker,
        tmp_path,
        MEMSTREAM_TOPIC_PARTITIONS="1",
        MEMSTREAM_GATEWAY_PORT=str(port),
        MEMSTREAM_IDLE_CLOSE_S="3600",  # no window closes: the users' state changes only when told
    )
    settings = pipeline.settings
    url = f"http://127.0.0.1:{port}"
    turns = list(generate(users=3, days=2, seed=5, tenant="default"))
    users = sorted({t.user_id for t in turns})
    gone = users[1]
    # another user, whose turns roll the segments and dirty the log while the test waits
    filler = [t.model_copy(update={"user_id": "filler"}) for t in generate(users=1, days=60, seed=6)]
    asyncio.run(ensure_topics(settings))
    pipeline.start()
    try:
        wait_for(lambda: ready(url), 120, "the gateway to be ready")
        configs = asyncio.run(_changelog_configs(settings))
        assert len(configs) >= 3, f"window-state, forgotten and tree-state changelogs: {sorted(configs)}"
        for name, config in configs.items():
            assert config["cleanup.policy"] == "compact", name
            assert int(config["delete.retention.ms"] or 0) > settings.storage.table_stale_after_s * 1000, name
        (window_log,) = [name for name in configs if name.endswith("window-state-changelog")]

        own = {u: [t for t in turns if t.user_id == u] for u in users}
        halves = [
            [t for u in users for t in own[u][: len(own[u]) // 2]],
            [t for u in users for t in own[u][len(own[u]) // 2 :]],
        ]
        for n, half in enumerate(halves, 1):  # in two goes: each user's state is written at least twice
            _send(settings, half)
            stored = sum(map(len, halves[:n]))
            wait_for(lambda: _stored(pipeline) == stored, 120, "the turns sent to be stored")  # noqa: B023
        wait_for(
            lambda: (
                min(Counter(_user(m.key, users) for m in _records(settings, window_log))[u] for u in users)
                >= 2
            ),
            30,
            "each user's state written twice",
        )
        assert httpx.delete(f"{url}/v1/users/{gone}", timeout=30).status_code in (200, 202, 204)
        last = wait_for(
            lambda: (now := _last(settings, window_log, users)).get(gone, b"") is None and now,
            60,
            "the forgotten user's tombstone",
        )
        assert all(last[user] is not None for user in users if user != gone)
        asyncio.run(set_topic_configs(settings, window_log, FAST_COMPACTION))

        def compacted() -> dict[str, Any] | None:
            _send(settings, filler[:1])  # one more write after the last: the segment before it rolls
            del filler[:1]
            time.sleep(0.3)
            kept = Counter(_user(m.key, users) for m in _records(settings, window_log))
            once = all(kept[user] == 1 for user in users if user != gone)
            return _last(settings, window_log, users) if once and kept[gone] == 0 else None

        after = wait_for(
            compacted, 120, "the cleaner to keep one record a user and drop the tombstone", poll=1
        )
    finally:
        pipeline.stop()
    assert gone not in after
    assert {user: after[user] for user in users if user != gone} == {
        user: last[user] for user in users if user != gone
    }


@pytest.mark.integration
async def test_a_retention_update_keeps_a_topics_other_settings(broker: AnyBroker) -> None:
    """`memstream topics` sets retention.ms where it differs; AlterConfigs replaces a topic's
    whole dynamic config, so the topic's other settings must be sent along."""
    if not isinstance(broker, KafkaServer):
        pytest.skip("topic configs are checked on Apache Kafka (MEMSTREAM_TEST_BROKERS=kafka)")
    prefix = f"r{uuid.uuid4().hex[:8]}."
    before = Settings(
        kafka=KafkaSettings(
            bootstrap_servers=broker.bootstrap, topic_prefix=prefix, topic_retention_ms={"turns": 60_000}
        )
    )
    after = before.replace(topic_retention_ms={"turns": 120_000, "windows": -1})
    turns, windows = before.kafka.topic("turns"), before.kafka.topic("windows")
    assert (await ensure_topics(before)).created
    await _shows(before, turns, "retention.ms", "60000")
    await set_topic_configs(before, turns, {"max.message.bytes": "2000000"})
    await _shows(before, turns, "max.message.bytes", "2000000")
    assert (await ensure_topics(after, update_existing=True)).retention_updated == [turns, windows]
    await _shows(after, turns, "retention.ms", "120000")
    await _shows(after, windows, "retention.ms", "-1")
    assert (await topic_configs(after, [turns]))[turns]["max.message.bytes"] == "2000000"
    assert (await ensure_topics(after, update_existing=True)).retention_updated == []


async def _shows(settings: Settings, topic: str, key: str, value: str, timeout: float = 10) -> None:
    """Wait until the broker describes ``topic`` with ``key`` = ``value``: a new topic, or a config
    just altered, reaches the broker's metadata a moment after the controller took it (KRaft)."""
    seen: object = None
    for _ in range(int(timeout / 0.2)):
        with suppress(RuntimeError):  # a topic the broker does not know yet
            seen = (await topic_configs(settings, [topic]))[topic].get(key)
            if seen == value:
                return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{topic} {key}: {seen!r}, not {value!r} after {timeout} s")


def _send(settings: Settings, turns: list[Turn]) -> None:
    asyncio.run(replay(settings, [RawRecord(t.key, t.to_bytes()) for t in turns], progress=False))


def _stored(pipeline: Any) -> int:
    status = status_or_none(pipeline)
    return int(status["units_in_store"]) if status else -1


def _records(settings: Settings, topic: str) -> list[Any]:
    return asyncio.run(read_records(settings, topic, idle_s=0.5))


def _user(key: bytes | None, users: list[str]) -> str | None:
    """Which of ``users`` a changelog key (the raw or serialised ``tenant/user_id``) is."""
    return next((u for u in users if key is not None and f"/{u}".encode() in key), None)


def _last(settings: Settings, topic: str, users: list[str]) -> dict[str, Any]:
    """The last value of each of ``users`` in ``topic`` (None for a tombstone)."""
    out: dict[str, Any] = {}
    for m in _records(settings, topic):
        if (user := _user(m.key, users)) is not None:
            out[user] = m.value
    return out


async def _changelog_configs(settings: Settings) -> dict[str, dict[str, str | None]]:
    """Every table changelog of the pipeline's app, with its topic configs."""
    admin = AIOKafkaAdminClient(**client_kwargs(settings))
    await admin.start()
    try:
        topics = await admin.list_topics()
    finally:
        await admin.close()
    return await topic_configs(
        settings, [t for t in topics if t.startswith(settings.kafka.app_id) and t.endswith("-changelog")]
    )

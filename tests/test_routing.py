"""A user's turns reach that user's memory whatever partitioner their producer used.

Unit level: the partitioners' arithmetic against known vectors, aiokafka's default against
``partition_for``, ``memstream.streams.routing.misplaced``, and the key checks. Integration: turns produced
with librdkafka's and Sarama's default partitioners (as platforms' own services would; on Apache
Kafka also by confluent-kafka's own Producer) to a real `memstream up` with two workers and four
partitions; every misplaced turn is forwarded once to its key's partition, and every user's memory
is stored, closed, consolidated and found there.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st

from memstream.adapters.broker import free_port, free_ports
from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.adapters.kafka import (
    by_key,
    ensure_topics,
    partition_for,
    producer,
    read_topic,
    settled,
    track_topics,
)
from memstream.adapters.kafka_server import KafkaServer
from memstream.adapters.settings import KafkaSettings, Settings, StorageSettings
from memstream.adapters.store import open_shards, scroll_all
from memstream.adapters.store.shards import EdgeShards
from memstream.apps.datasets import RawRecord
from memstream.apps.replay import replay
from memstream.apps.sample_conversations import generate
from memstream.core.memories import MEMORIES, memories_spec, memory_from_payload
from memstream.core.unit_views import views_spec
from memstream.core.units import UNITS, unit_from_payload, units_spec
from memstream.schemas.events import ConsolidationRequest, DeadLetter, Turn, WindowClosed
from memstream.schemas.memory import MemoryKind
from memstream.schemas.topics import CONSOLIDATION, DEAD_LETTER, TURNS, WINDOWS
from memstream.streams.faust_adapter import faust_settings
from memstream.streams.ingest import Incoming, IngestProcessor
from memstream.streams.routing import misplaced
from tests.conftest import (
    AnyBroker,
    consolidated_units,
    each_worker_owns_a_partition,
    make_pipeline,
    ready,
    small_talk_units,
    wait_for,
)
from tests.partitioners import (
    Partitioner,
    fnv1a_32,
    librdkafka_consistent,
    produce,
    produce_with_confluent,
    produce_with_console,
    sarama_hash,
)
from tests.test_faults import status_or_none

# --- the arithmetic -------------------------------------------------------------------------------


def test_partitioners_match_known_vectors() -> None:
    # FNV-1a 32-bit reference values (the FNV authors' test suite); CRC-32's check value.
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968
    six = list(range(6))
    assert librdkafka_consistent(b"123456789", six, six) == 0xCBF43926 % 6
    # "a" hashes to a negative int32: Sarama takes the absolute value of Go's truncated remainder.
    assert sarama_hash(b"a", six, six) == (2**32 - 0xE40C292C) % 6
    assert sarama_hash(b"foobar", six, six) == (2**32 - 0xBF9CF968) % 6


@given(key=st.binary(min_size=1, max_size=64), n=st.integers(1, 64))
def test_our_producers_and_aiokafkas_default_agree_with_partition_for(key: bytes, n: int) -> None:
    everything = list(range(n))
    assert DefaultPartitioner()(key, everything, everything) == partition_for(key, n)
    assert by_key(key, everything, everything) == partition_for(key, n)


def test_faust_produces_with_our_partitioner() -> None:
    assert faust_settings(Settings())["producer_partitioner"] is by_key


@given(key=st.one_of(st.none(), st.binary(max_size=40)), arrived=st.integers(0, 31), n=st.integers(1, 32))
def test_a_turn_is_forwarded_only_off_its_keys_partition(key: bytes | None, arrived: int, n: int) -> None:
    arrived %= n
    home = misplaced(key, arrived, n)
    if key is None:
        assert home is None  # dead-lettered where it arrived
    elif partition_for(key, n) == arrived:
        assert home is None
    else:
        assert home == partition_for(key, n)


def test_keyless_and_mismatched_turns_are_dead_lettered(tmp_path: Path) -> None:
    turn = next(generate(users=1, days=3, seed=2))
    shards = EdgeShards(tmp_path / "store", [units_spec(64), views_spec(64)])
    processor = IngestProcessor(
        Settings(storage=StorageSettings(data_dir=tmp_path)), HashingEmbedder(64), shards
    )
    batch = [
        Incoming(turn.to_bytes(), None, "turns", 0, 0),
        Incoming(turn.to_bytes(), "demo/someone-else", "turns", 0, 1),
    ]
    result = asyncio.run(processor.process(batch, {}))
    assert [d.reason for d in result.dead_letters] == ["missing_key", "key_mismatch"]
    assert turn.key in result.dead_letters[0].detail and "someone-else" in result.dead_letters[1].detail
    assert shards.get(0).count(UNITS) == 0
    ok = asyncio.run(processor.process([Incoming(turn.to_bytes(), turn.key, "turns", 0, 2)], {}))
    assert not ok.dead_letters and shards.get(0).count(UNITS) == 1


# --- end to end -----------------------------------------------------------------------------------


@pytest.mark.integration
def test_turns_from_any_partitioner_reach_their_users_memory(broker: AnyBroker, tmp_path: Path) -> None:
    turns = _turns()
    users = sorted({t.user_id for t in turns})
    # A third of the users each from a librdkafka-like, a Sarama-like and our own producer.
    clients: dict[str, Partitioner] = {"crc32": librdkafka_consistent, "fnv1a": sarama_hash}
    by_client = {
        name: [t for t in turns if users.index(t.user_id) % 3 == i] for i, name in enumerate(clients)
    }
    ours = [t for t in turns if users.index(t.user_id) % 3 == 2]

    def send(settings: Settings) -> dict[str, int]:
        landed = {
            name: [m.partition for m in asyncio.run(produce(settings, by_client[name], p))]
            for name, p in clients.items()
        }
        asyncio.run(replay(settings, [RawRecord(t.key, t.to_bytes()) for t in ours], progress=False))
        return {name: _misplaced(settings, by_client[name], ps) for name, ps in landed.items()}

    _reach_their_users_memory(broker, tmp_path, turns, send)


@pytest.mark.integration
def test_confluent_kafkas_default_partitioner_reaches_every_users_memory(
    broker: AnyBroker, tmp_path: Path
) -> None:
    """The real librdkafka client, as a platform's services would produce, on Apache Kafka."""
    if not isinstance(broker, KafkaServer):
        pytest.skip("confluent-kafka is checked on Apache Kafka (MEMSTREAM_TEST_BROKERS=kafka)")
    turns = _turns()

    def send(settings: Settings) -> dict[str, int]:
        landed = produce_with_confluent(settings, turns)
        everything = list(range(settings.kafka.topic_partitions))
        # the pure-Python imitation the test above uses is librdkafka's arithmetic
        assert landed == [librdkafka_consistent(t.key.encode(), everything, everything) for t in turns]
        return {"confluent-kafka": _misplaced(settings, turns, landed)}

    _reach_their_users_memory(broker, tmp_path, turns, send)


@pytest.mark.integration
def test_kafkas_console_producer_reaches_every_users_memory(broker: AnyBroker, tmp_path: Path) -> None:
    """Kafka's own console producer, as docs/api.md shows it: Java's default partitioner is the
    one memstream keys by, so nothing is misplaced or forwarded."""
    if not isinstance(broker, KafkaServer):
        pytest.skip("Kafka's console producer is checked on Apache Kafka (MEMSTREAM_TEST_BROKERS=kafka)")
    turns = _turns()

    def send(settings: Settings) -> dict[str, int]:
        landed = produce_with_console(broker, settings, turns)
        return {"console producer": _misplaced(settings, turns, landed)}

    _reach_their_users_memory(broker, tmp_path, turns, send, misplaces=False)


def _turns() -> list[Turn]:
    """Nine users whose turns each make a recurrence request (checked below), in tenant default,
    which the gateway without API keys reads."""
    return list(generate(users=9, days=20, seed=3, tenant="default"))


def _misplaced(settings: Settings, turns: list[Turn], landed: list[int]) -> int:
    """How many of ``turns`` landed off their key's partition (memstream's ``partition_for``)."""
    n = settings.kafka.topic_partitions
    return sum(p != partition_for(t.key.encode(), n) for t, p in zip(turns, landed, strict=True))


def _reach_their_users_memory(
    broker: AnyBroker,
    tmp_path: Path,
    turns: list[Turn],
    send: Callable[[Settings], dict[str, int]],
    misplaces: bool = True,
) -> None:
    """Start `memstream up` (two workers, four partitions), ``send`` the ``turns`` (it answers how
    many each client misplaced: some, or none when ``misplaces`` is false), then a keyless and a
    mismatched turn; check every misplaced turn is forwarded once (the rerouted count) and every
    user's memory is stored in its key's shard, closed, consolidated and found through the gateway,
    and the two bad turns dead-lettered."""
    port = free_port()
    pipeline = make_pipeline(
        broker,
        tmp_path,
        MEMSTREAM_WORKERS="2",
        MEMSTREAM_METRICS_PORT=str(free_ports(2)),
        MEMSTREAM_TOPIC_PARTITIONS="4",
        MEMSTREAM_GATEWAY_PORT=str(port),
    )
    settings = pipeline.settings
    n = settings.kafka.topic_partitions
    users = sorted({t.user_id for t in turns})
    nobody = turns[0].model_copy(update={"user_id": "keyless", "turn_id": "k"})
    someone = turns[0].model_copy(update={"user_id": "mismatched", "turn_id": "m"})
    asyncio.run(ensure_topics(settings))
    pipeline.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: ready(url), 120, "the gateway to be ready")
        # Else the rebalance as the second worker joins redelivers what the first had not committed:
        # forwarded again, which the rerouted count below would count twice (seen once on Kafka).
        wait_for(lambda: each_worker_owns_a_partition(settings), 120, "both workers to own partitions")
        off = send(settings)
        asyncio.run(_bad(settings, nobody, someone))
        if misplaces:
            assert all(off.values()), f"each client must misplace some turns: {off}"
        else:
            assert not any(off.values()), f"a client keyed as memstream is misplaced turns: {off}"

        def status() -> dict[str, Any] | None:
            st = status_or_none(pipeline)
            return st if st and st["units_in_store"] == len(turns) else None

        wait_for(status, 120, "every turn to be stored")
        wait_for(lambda: _idle_closed(settings) >= set(users), 60, "an idle window closed for every user")
        wait_for(lambda: asyncio.run(settled(settings)), 120, "consolidation to settle")
        final = wait_for(status, 30, "status")
        recalled = {u: _recall(url, u) for u in users}
    finally:
        pipeline.stop()

    rerouted = final.get("memstream_turns_rerouted", {})
    print(f"\nrouting: {len(turns)} turns of {len(users)} users, misplaced {off}; rerouted {rerouted}")
    assert sum(rerouted.values()) == sum(off.values())

    # Every unit stored once, in its key's shard; consolidation and the tree found them there.
    shards = open_shards(
        settings.storage,
        [
            units_spec(settings.embedding.hash_dim),
            views_spec(settings.embedding.hash_dim),
            memories_spec(settings.embedding.hash_dim),
        ],
    )
    try:
        where = {p: shards.get(p) for p in range(n)}
        units = [(p, unit_from_payload(h.payload)) for p, s in where.items() for h in scroll_all(s, UNITS)]
        memories = [memory_from_payload(h.payload) for s in where.values() for h in scroll_all(s, MEMORIES)]
    finally:
        shards.close()
    assert Counter(f"{u.key}/{u.turn_id}" for _, u in units) == Counter(f"{t.key}/{t.turn_id}" for t in turns)
    assert all(p == partition_for(u.key.encode(), n) for p, u in units)
    requests = [ConsolidationRequest.from_bytes(v) for v in _values(settings, CONSOLIDATION.name)]
    in_episodes = Counter(u for m in memories if m.kind == MemoryKind.EPISODE for u in consolidated_units(m))
    assert {r.user_id for r in requests} == set(users)
    small_talk = small_talk_units(u for _, u in units)  # makes no memory
    assert {u for r in requests for u in r.unit_ids} - small_talk <= set(in_episodes)
    assert max(in_episodes.values()) == 1
    sessions = {m.user_id for m in memories if m.kind == MemoryKind.SESSION}
    assert sessions == set(users)
    for user, items in recalled.items():
        assert items and all(i.startswith(f"{user}-") for item in items for i in item["source_turn_ids"])
    reasons = [d.reason for d in map(DeadLetter.from_bytes, _values(settings, DEAD_LETTER.name))]
    assert sorted(reasons) == ["key_mismatch", "missing_key"]


@pytest.mark.integration
async def test_a_tracked_topic_stays_in_the_producers_metadata(broker: AnyBroker) -> None:
    """A changelog the producer found in an all-topics metadata answer is still known after it
    sends to a topic created later (the table write that failed for ever on Kafka, streams/app.py)."""
    first, later = (
        Settings(
            kafka=KafkaSettings(bootstrap_servers=broker.bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:8]}.")
        )
        for _ in "ab"
    )
    await ensure_topics(first)
    kept = first.kafka.topic(WINDOWS.name)
    async with producer(first) as p:
        for _ in range(50):  # tracks nothing yet: every topic, once the new ones have leaders
            await p.client.force_metadata_update()
            if p.client.cluster.partitions_for_topic(kept):
                break
            await asyncio.sleep(0.2)
        assert p.client.cluster.partitions_for_topic(kept)
        await track_topics(p, [kept])
        await ensure_topics(later)
        await p.send_and_wait(later.kafka.topic(TURNS.name), b"{}", key=b"default/u")  # unknown: now tracked
        await p.client.force_metadata_update()
        assert p.client.cluster.partitions_for_topic(kept)


async def _bad(settings: Settings, keyless: Turn, mismatched: Turn) -> None:
    async with producer(settings) as p:
        topic = settings.kafka.topic(TURNS.name)
        await p.send_and_wait(topic, keyless.to_bytes(), key=None)
        await p.send_and_wait(topic, mismatched.to_bytes(), key=b"default/user-0000")


def _values(settings: Settings, name: str) -> list[bytes]:
    return [v for _, v in asyncio.run(read_topic(settings, settings.kafka.topic(name)))]


def _idle_closed(settings: Settings) -> set[str]:
    closed = [WindowClosed.from_bytes(v) for v in _values(settings, WINDOWS.name)]
    return {w.user_id for w in closed if w.reason.value == "idle"}


def _recall(url: str, user: str) -> list[dict[str, Any]]:
    body = {"user_id": user, "query": "What did I talk about?", "now": "2025-02-01T12:00:00Z"}
    r = httpx.post(f"{url}/v1/recall", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return list(orjson.loads(r.content)["items"])

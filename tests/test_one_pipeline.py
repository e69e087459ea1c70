"""One pipeline: the in-process run (memstream/streams/offline.py, what ``memstream eval locomo``, the
benchmarks and the consolidation tests measure) and ``memstream up`` on the test broker make the same
memory of the same turns.

The turns: a generated sample (two users over five weeks: sessions, days, weeks and a month close,
and the month's durative memory is written) and, when ../shared/data is present, the whole LoCoMo dev
split (its two conversations, 38 sessions, 788 turns). Each user's turns are replayed together, so that the
idle close (10 s of wall clock) ends a user only once all their turns are in: the in-process run closes
every user's windows after the whole input. The durative delay (60 s) outlasts the consolidation of
the input, as the in-process run's order assumes (its docstring, difference 2).

Compared: every unit and every memory as whole records (ids, kinds, levels, texts, start/end,
recorded_at, expiry, provenance, children), the Kafka run's two partitions' stores against the
in-process run's one store.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from memstream.adapters.broker import Broker
from memstream.adapters.embedders import make_embedder
from memstream.adapters.kafka import read_topic, settled
from memstream.adapters.settings import Settings
from memstream.adapters.store import scroll_all
from memstream.adapters.store.shards import EdgeShards
from memstream.apps.datasets import RawRecord, locomo_turns
from memstream.apps.replay import replay
from memstream.apps.sample_conversations import generate
from memstream.core.memories import MEMORIES, memories_spec, memory_from_payload
from memstream.core.unit_views import views_spec
from memstream.core.units import UNITS, unit_from_payload, units_spec
from memstream.schemas.events import Turn
from memstream.schemas.memory import MemoryKind
from memstream.schemas.topics import WINDOWS
from memstream.streams.offline import InProcess
from tests.conftest import LOCOMO, each_worker_owns_a_partition, make_pipeline, stored

pytestmark = pytest.mark.integration

Records = dict[str, dict[str, Any]]  # id -> the whole record


def sample() -> list[Turn]:
    generated = sorted(generate(users=2, days=35, seed=5), key=lambda t: t.user_id)  # stable: time order kept
    if not LOCOMO.exists():
        return generated
    return generated + list(locomo_turns(LOCOMO, tenant="locomo"))  # the whole dev split


def in_process(settings: Settings, turns: list[Turn], data: Path) -> tuple[Records, Records, int]:
    """Units, memories and the number of windows closed, run in process."""
    settings = settings.replace(data_dir=data)
    embedder = make_embedder(settings.embedding)
    shards = EdgeShards(
        data / "store", [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)]
    )
    try:
        pipeline = InProcess(settings, embedder, shards)
        asyncio.run(pipeline.run(turns))
        store = shards.get(0)
        units = {h.id: unit_from_payload(h.payload).model_dump() for h in scroll_all(store, UNITS)}
        memories = {h.id: memory_from_payload(h.payload).model_dump() for h in scroll_all(store, MEMORIES)}
        return units, memories, len(pipeline.topics.logs[WINDOWS.name])
    finally:
        shards.close()


def differences(kafka: Records, local: Records) -> str:
    only_kafka, only_local = kafka.keys() - local.keys(), local.keys() - kafka.keys()
    differing = [k for k in kafka.keys() & local.keys() if kafka[k] != local[k]]
    fields = Counter(f for k in differing for f in kafka[k] if kafka[k][f] != local[k][f])

    def kinds(ids: Any, records: Records) -> dict[str, int]:
        return dict(Counter(str(records[i].get("kind", "unit")) for i in ids))

    return (
        f"memstream up {len(kafka)}, in process {len(local)}; only under memstream up "
        f"{kinds(only_kafka, kafka)}, only in process {kinds(only_local, local)}, differing "
        f"{kinds(differing, kafka)} in {dict(fields)}"
    )


def test_in_process_and_memstream_up_make_the_same_memory_of_the_same_turns(
    broker: Broker, tmp_path: Path
) -> None:
    turns = sample()
    pipeline = make_pipeline(
        broker, tmp_path, MEMSTREAM_IDLE_CLOSE_S="10", MEMSTREAM_DURATIVE_DELAY_S="60"
    ).start()
    settings = pipeline.settings
    units, memories, windows = in_process(settings, turns, tmp_path / "in-process")
    try:
        pipeline.wait(lambda: each_worker_owns_a_partition(settings), 120, "the partitions to be held")
        records = [RawRecord(t.key, t.to_bytes()) for t in turns]
        report = asyncio.run(replay(settings, records, wait=True, wait_timeout=240, progress=False))
        assert report.processed, pipeline.problems()
        pipeline.wait(
            lambda: len(asyncio.run(read_topic(settings, settings.kafka.topic(WINDOWS.name)))) >= windows,
            120,
            f"the {windows} windows the in-process run closed",
        )
        pipeline.wait(lambda: asyncio.run(settled(settings)), 180, "consolidation to settle")
    finally:
        pipeline.stop()
    kafka_units, kafka_memories = stored(settings)
    up = {u.unit_id: u.model_dump() for u in kafka_units}
    up_memories = {m.memory_id: m.model_dump() for m in kafka_memories}
    levels = Counter(m["level"] for m in memories.values())
    print(f"\none pipeline: {len(turns)} turns, {len(units)} units, {len(memories)} memories {dict(levels)}")
    assert len(units) == len(turns) and {MemoryKind.TOPIC, MemoryKind.PERSONA} <= {
        m["kind"] for m in memories.values()
    }
    assert up == units, differences(up, units)
    assert up_memories == memories, differences(up_memories, memories)

"""The ingest processor without Kafka: real Qdrant Edge store, hashing embedder, dict window state."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.adapters.kafka import partition_for
from memstream.adapters.settings import Settings, StorageSettings
from memstream.adapters.store import scroll_all
from memstream.adapters.store.shards import EdgeShards
from memstream.apps.sample_conversations import generate
from memstream.core.unit_views import views_spec
from memstream.core.units import CONSOLIDATED, STATE_FIELD, UNITS, units_spec
from memstream.schemas.events import ConsolidationRequest
from memstream.streams.ingest import BatchResult, Incoming, IngestProcessor

# A tenant whose three users' keys fall on three different partitions of 3 (see the spread test).
TURNS = list(generate(users=3, days=30, seed=5, tenant="demo"))
RECORDS = [Incoming(t.to_bytes(), t.key, "turns", 0, i) for i, t in enumerate(TURNS)]


async def step(processor: IngestProcessor, batch: list[Incoming], state: dict[bytes, Any]) -> BatchResult:
    """One batch, its window state saved as the app saves it (after publishing)."""
    result = await processor.process(batch, state)
    state.update(result.window_state)
    return result


def run(
    tmp: Path, batch: int, records: list[Incoming] = RECORDS
) -> tuple[IngestProcessor, list[ConsolidationRequest]]:
    shards = EdgeShards(tmp / "store", [units_spec(384), views_spec(384)])
    processor = IngestProcessor(Settings(storage=StorageSettings(data_dir=tmp)), HashingEmbedder(384), shards)
    state: dict[bytes, Any] = {}
    fired: list[ConsolidationRequest] = []

    async def feed() -> None:
        for i in range(0, len(records), batch):
            fired.extend((await step(processor, records[i : i + batch], state)).consolidation)

    asyncio.run(feed())
    return processor, fired


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_recurrence_does_not_depend_on_batching(tmp_path: Path, batch: int) -> None:
    _, whole = run(tmp_path / "whole", 512)
    _, split = run(tmp_path / "split", batch)
    assert whole, "the sample set must make topics recur"
    assert [r.request_id for r in split] == [r.request_id for r in whole]


def test_members_are_marked_and_a_cluster_never_fires_twice(tmp_path: Path) -> None:
    processor, fired = run(tmp_path, 64)
    members = [i for r in fired for i in r.unit_ids]
    assert len(members) == len(set(members))  # every unit is in at most one request
    states = {h.id: h.payload[STATE_FIELD] for h in scroll_all(processor.shards.get(0), UNITS)}
    assert {i for i, s in states.items() if s == CONSOLIDATED} == set(members)
    assert len(states) == len(TURNS)


def test_redelivery_stores_nothing_and_republishes_the_same_requests(tmp_path: Path) -> None:
    processor, fired = run(tmp_path, 64)
    state: dict[bytes, Any] = {}

    async def again() -> list[ConsolidationRequest]:
        out: list[ConsolidationRequest] = []
        for i in range(0, len(RECORDS), 100):
            result = await step(processor, RECORDS[i : i + 100], state)
            assert result.duplicates == len(RECORDS[i : i + 100])
            assert not result.dead_letters
            out.extend(result.consolidation)
        return out

    replayed = asyncio.run(again())
    # A crash between storing and publishing loses nothing: the trigger re-publishes its request
    # (same id, so consumers can drop the repeat) and no new request appears.
    assert sorted(r.request_id for r in replayed) == sorted(r.request_id for r in fired)
    assert processor.shards.get(0).count(UNITS) == len(TURNS)


def test_each_partition_keeps_its_users_units_and_decisions_do_not_change(tmp_path: Path) -> None:
    partitioned = [
        Incoming(t.to_bytes(), t.key, "turns", partition_for(t.key.encode(), 3), i)
        for i, t in enumerate(TURNS)
    ]
    assert len({r.partition for r in partitioned}) > 1, "the sample users must spread over partitions"
    _, whole = run(tmp_path / "one", 64)
    processor, split = run(tmp_path / "three", 64, partitioned)
    assert sorted(r.request_id for r in split) == sorted(r.request_id for r in whole)
    for p in range(3):
        users = {t.key for t, r in zip(TURNS, partitioned, strict=True) if r.partition == p}
        stored = scroll_all(processor.shards.get(p), UNITS)
        assert {h.payload["user_key"] for h in stored} == users
        assert len(stored) == sum(1 for r in partitioned if r.partition == p)


class Crash(Exception):
    """The process dies here."""


def test_a_crash_before_the_older_members_are_marked_never_puts_a_unit_in_two_requests(
    tmp_path: Path,
) -> None:
    """A batch stores its units with their decisions, then marks the older members of the
    requests it fired. A crash in between leaves those members buffered; the redelivered batch
    re-marks them before checking its new units, or a new unit would take them into a second
    request (found by tests/test_faults.py, a worker killed mid-replay)."""
    _, whole = run(tmp_path / "whole", 64)
    shards = EdgeShards(tmp_path / "store", [units_spec(384), views_spec(384)])
    processor = IngestProcessor(
        Settings(storage=StorageSettings(data_dir=tmp_path)), HashingEmbedder(384), shards
    )
    state: dict[bytes, Any] = {}
    fired: list[ConsolidationRequest] = []

    def crash(*args: object) -> None:
        raise Crash

    async def until_crash() -> int:
        for i in range(0, len(RECORDS), 64):
            shards.get(0).set_payload = crash  # type: ignore[method-assign]
            try:
                fired.extend((await step(processor, RECORDS[i : i + 64], state)).consolidation)
            except Crash:
                return i
        raise AssertionError("no batch marked older members")

    crashed_at = asyncio.run(until_crash())
    assert crashed_at > 0
    shards.close()

    # Restarted: the batch is redelivered together with the next turns, which are new.
    shards = EdgeShards(tmp_path / "store", [units_spec(384), views_spec(384)])
    processor = IngestProcessor(
        Settings(storage=StorageSettings(data_dir=tmp_path)), HashingEmbedder(384), shards
    )

    async def rest() -> None:
        for i in range(crashed_at, len(RECORDS), 200):
            fired.extend((await step(processor, RECORDS[i : i + 200], state)).consolidation)

    asyncio.run(rest())
    members = [i for r in {r.request_id: r for r in fired}.values() for i in r.unit_ids]
    assert len(members) == len(set(members))
    assert {r.request_id for r in fired} == {r.request_id for r in whole}


def test_a_crash_before_the_window_state_is_saved_closes_the_same_windows_on_redelivery(
    tmp_path: Path,
) -> None:
    """The app saves a batch's window state only after publishing the windows it closed. A crash
    in between (state not saved) must not lose them: the redelivered batch closes the same
    windows again, with the same ids. The processor never writes the state it is given."""
    shards = EdgeShards(tmp_path / "store", [units_spec(384), views_spec(384)])
    processor = IngestProcessor(
        Settings(storage=StorageSettings(data_dir=tmp_path)), HashingEmbedder(384), shards
    )
    state: dict[bytes, Any] = {}
    first, batch = RECORDS[:200], RECORDS[200:400]

    async def crash_then_redeliver() -> tuple[BatchResult, BatchResult]:
        await step(processor, first, state)
        saved = dict(state)
        crashed = await processor.process(batch, MappingProxyType(state))  # published, never saved
        assert state == saved
        return crashed, await step(processor, batch, state)

    crashed, again = asyncio.run(crash_then_redeliver())
    assert crashed.windows, "the batch must close windows"
    assert again.duplicates == len(batch)
    assert [w.window_id for w in again.windows] == [w.window_id for w in crashed.windows]

    def windows(result: BatchResult) -> dict[bytes, Any]:  # without the wall-clock last_seen
        return {k: (v["open"], v["last_ts"]) for k, v in result.window_state.items()}

    assert windows(again) == windows(crashed)

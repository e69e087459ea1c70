"""Read your own writes (streams/read_your_writes.py) on a real Qdrant Edge store with the real indexer:
a user's next consolidation waits until the updates published for them are indexed, never longer
than its timeout, and other users do not wait."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstream.adapters import metrics
from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.adapters.store.shards import EdgeShards
from memstream.consumers.indexer import Indexer
from memstream.core.memories import MEMORIES, memories_spec, memory_from_payload, memory_payload, upsert
from memstream.core.store import VectorStore
from memstream.core.unit_views import views_spec
from memstream.core.units import units_spec
from memstream.schemas.memory import LEVEL, Memory, MemoryKind, MemoryOp, MemoryUpdate, Triple
from memstream.streams.read_your_writes import Interrupted, OwnWrites, reflects

EMBEDDER = HashingEmbedder(64)


def memory(n: int, user: str = "u1", kind: MemoryKind = MemoryKind.EPISODE, requests: int = 1) -> Memory:
    fact = kind == MemoryKind.FACT
    return Memory(
        memory_id=f"00000000-0000-0000-0000-{n:012d}",
        tenant="t",
        user_id=user,
        kind=kind,
        level=LEVEL[kind],
        text=f"memory number {n} about hiking",
        start=datetime(2025, 1, 1, 9, tzinfo=UTC),
        end=None if fact else datetime(2025, 1, 1, 10, tzinfo=UTC),
        recorded_at=datetime(2025, 1, 1, 10, tzinfo=UTC),
        source_turn_ids=[f"turn-{n}"],
        request_ids=[f"r{i}" for i in range(requests)],
        triple=Triple(subject="user", predicate="likes", object="hiking") if fact else None,
        fact_type="preference" if fact else None,  # type: ignore[arg-type]
        extractive=True,
        writer="extractive@1",
    )


def invalidate(m: Memory, by: str) -> MemoryUpdate:
    return MemoryUpdate(
        op=MemoryOp.INVALIDATE,
        memory_id=m.memory_id,
        tenant=m.tenant,
        user_id=m.user_id,
        valid_to=datetime(2025, 2, 1, tzinfo=UTC),
        expired_at=datetime(2025, 2, 1, tzinfo=UTC),
        superseded_by=by,
    )


@pytest.fixture
def store(tmp_path: Path) -> VectorStore:
    shards = EdgeShards(
        tmp_path / "store", [units_spec(EMBEDDER.dim), views_spec(EMBEDDER.dim), memories_spec(EMBEDDER.dim)]
    )
    return shards.get(0)


def stored(store: VectorStore, m: Memory) -> Memory | None:
    found = store.retrieve(MEMORIES, [m.memory_id])
    return memory_from_payload(found[0].payload) if found else None


class Clock:
    """A fake clock: its sleep advances time and yields to the event loop."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds
        await asyncio.sleep(0)


@given(st.integers(0, 10**6), st.sampled_from(list(MemoryKind)), st.integers(1, 5))
def test_an_upsert_is_reflected_by_its_payload_round_trip(n: int, kind: MemoryKind, requests: int) -> None:
    m = memory(n, kind=kind, requests=requests)
    assert reflects(upsert(m), memory_from_payload(memory_payload(m)))
    assert not reflects(upsert(m), None)
    assert not reflects(upsert(m), memory(n, kind=kind, requests=requests + 1))


def test_an_invalidate_is_reflected_once_superseded_or_when_there_is_nothing_to_mark() -> None:
    m = memory(1, kind=MemoryKind.FACT)
    gone = m.model_copy(update={"superseded_by": "new", "expired_at": datetime(2025, 2, 1, tzinfo=UTC)})
    assert reflects(invalidate(m, "new"), gone)
    assert not reflects(invalidate(m, "new"), m)
    assert reflects(invalidate(m, "new"), None)


def test_the_next_work_waits_until_the_indexer_shows_the_updates(store: VectorStore) -> None:
    first, second = memory(1), memory(2, kind=MemoryKind.FACT)
    updates = [upsert(first), upsert(second), invalidate(second, "x")]
    clock = Clock()
    indexer = Indexer(EMBEDDER)
    writes = OwnWrites(timeout_s=30, poll_s=0.02, sleep=clock.sleep, clock=clock)
    writes.published(updates)
    assert writes.waiting(first.key) == 2  # the invalidate replaced the upsert of the same id

    async def run() -> None:  # the indexer applies the updates after the third poll
        task = asyncio.ensure_future(writes.visible(store, first.key))
        while clock.sleeps < 3:
            await asyncio.sleep(0)
        assert not task.done()
        await indexer.apply(store, updates)
        await task

    before = metrics.OWN_WRITES_TIMEOUTS._value.get()
    asyncio.run(run())
    assert clock.sleeps >= 3 and writes.waiting(first.key) == 0
    assert stored(store, first) == first
    assert (s := stored(store, second)) is not None and s.superseded_by == "x"
    assert metrics.OWN_WRITES_TIMEOUTS._value.get() == before


def test_other_users_and_a_user_with_nothing_pending_do_not_wait(store: VectorStore) -> None:
    clock = Clock()
    writes = OwnWrites(sleep=clock.sleep, clock=clock)
    writes.published([upsert(memory(1, user="u1"))])
    asyncio.run(writes.visible(store, "t/u2"))
    assert clock.sleeps == 0
    writes.forget("t/u1")  # a deleted user: nothing left to wait for
    asyncio.run(writes.visible(store, "t/u1"))
    assert clock.sleeps == 0


def test_it_stops_waiting_after_the_timeout_and_counts_it(store: VectorStore) -> None:
    clock = Clock()
    writes = OwnWrites(timeout_s=5, poll_s=0.5, sleep=clock.sleep, clock=clock)
    m = memory(1)
    writes.published([upsert(m)])
    before = metrics.OWN_WRITES_TIMEOUTS._value.get()
    asyncio.run(writes.visible(store, m.key))  # never indexed
    assert 5 < clock.now <= 6
    assert metrics.OWN_WRITES_TIMEOUTS._value.get() == before + 1
    assert writes.waiting(m.key) == 0  # given up on: the next work does not wait again


def test_a_stopping_or_rebalancing_worker_hands_the_work_on(store: VectorStore) -> None:
    """Its index agent reads nothing then: waiting would hold up the rebalance until the timeout,
    and going on would decide on a stale read."""
    clock = Clock()
    writes = OwnWrites(timeout_s=30, poll_s=0.5, sleep=clock.sleep, clock=clock)
    m, indexed = memory(1), memory(2)
    writes.published([upsert(m)])
    with pytest.raises(Interrupted, match="1 updates of t/u1 not indexed yet"):
        asyncio.run(writes.visible(store, m.key, interrupted=lambda: True))  # never indexed
    assert clock.sleeps == 0
    assert writes.waiting(m.key) == 1  # still awaited by the next work here
    writes.forget(m.key)
    writes.published([upsert(indexed)])
    asyncio.run(Indexer(EMBEDDER).apply(store, [upsert(indexed)]))
    asyncio.run(writes.visible(store, indexed.key, interrupted=lambda: True))  # nothing missing: no raise


def test_a_second_waiter_for_the_user_leaves_what_was_published_after_it_began(store: VectorStore) -> None:
    """The consolidation and the summary agents wait for the same user. When one returns and its
    next work publishes, the other, returning later, must not drop those new updates: the next
    consolidation would read a stale episode and merge into it, losing a request (seen in CI:
    tests/test_replicas.py, one episode without one request's units)."""
    first, second = memory(1), memory(2)
    gate = asyncio.Event()
    polls = 0

    async def sleep(seconds: float) -> None:
        nonlocal polls
        polls += 1
        await gate.wait()

    writes = OwnWrites(timeout_s=30, poll_s=0.02, sleep=sleep)

    async def run() -> None:
        writes.published([upsert(first)])
        other = asyncio.ensure_future(writes.visible(store, first.key))  # polls, then sleeps
        while polls < 1:
            await asyncio.sleep(0)
        await Indexer(EMBEDDER).apply(store, [upsert(first)])
        await writes.visible(store, first.key)  # sees it at once and returns
        writes.published([upsert(second)])  # its next work
        gate.set()
        await other  # wakes to find everything it waited for visible

    asyncio.run(run())
    assert writes.waiting(first.key) == 1  # the second update is still awaited

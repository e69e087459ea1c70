"""memstream/core/forgetting.py: erasing a user's points, and which records of a deleted user are still
theirs; the index agent's handler writes nothing back for a user erased while it worked."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memstream.adapters.settings import Settings
from memstream.adapters.store.edge import EdgeStore
from memstream.consumers.indexer import Indexer
from memstream.core.embedder import Vectors
from memstream.core.forgetting import Forgotten, erase_user, made_before, sent_before
from memstream.core.memories import MEMORIES, memories_spec, upsert
from memstream.core.store import CollectionSpec, Point, VectorStore
from memstream.core.units import USER_FIELD
from memstream.schemas.events import Deferred, Tombstone, WindowClosed
from memstream.schemas.memory import MemoryUpdate
from memstream.schemas.topics import CONSOLIDATION, DEFERRED, MEMORY_UPDATES, TOMBSTONES, WINDOWS
from memstream.streams.decisions import Decision, Done, Dropped, made_at
from memstream.streams.handlers import Consolidating, Forgetting, Indexing, Retries
from memstream.streams.ingest import Incoming
from memstream.streams.publish import Publisher
from memstream.streams.read_your_writes import OwnWrites, ReadYourWrites, Takeover
from tests.test_own_writes import EMBEDDER, memory, stored

GONE = Forgotten(deleted_at=100.0, handled_at=100.4)


def test_turns_sent_before_the_delete_are_the_users_and_later_ones_new_data() -> None:
    assert sent_before(GONE, 99.9) and sent_before(GONE, 100.0)
    assert not sent_before(GONE, 100.1)  # sent after the DELETE, even if before it was handled
    assert sent_before(GONE, None)  # no create time: assume it was the user's
    assert not sent_before(None, 50.0)  # never deleted


def test_work_made_before_the_worker_erased_the_user_is_theirs() -> None:
    assert made_before(GONE, 100.2) and made_before(GONE, 100.4) and made_before(GONE, None)
    assert not made_before(GONE, 100.5)
    assert not made_before(None, 1.0)


@given(st.floats(0, 1e10), st.floats(0, 1e10))
def test_the_times_round_trip_through_the_table(deleted: float, handled: float) -> None:
    gone = Forgotten(deleted, handled)
    assert Forgotten.from_json(gone.to_json()) == gone
    assert Forgotten.from_json(None) is None


def test_erasing_a_user_deletes_their_points_in_every_collection_and_counts_them(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "store")
    held = {"units": {"t/ada": 3, "t/bo": 2}, "memories": {"t/ada": 1, "t/bo": 4}, "other": {"t/ada": 2}}
    for collection, users in held.items():
        store.ensure_collection(CollectionSpec(name=collection, dim=4, keyword_fields=[USER_FIELD]))
        points = [
            Point(str(uuid.uuid4()), np.ones(4, dtype=np.float32), {USER_FIELD: user})
            for user, n in users.items()
            for _ in range(n)
        ]
        store.upsert(collection, points)
    assert erase_user(store, "t/ada", ["units", "memories"]) == [3, 1]
    assert [store.count(c) for c in ("units", "memories", "other")] == [
        2,
        4,
        2,
    ]  # bo's; a collection not named
    assert erase_user(store, "t/ada", ["units", "memories"]) == [0, 0]
    store.close()


class HeldEmbedder:
    """The test embedder, held inside ``embed`` (the indexer runs it in a thread) until released."""

    name, dim, default_theta_sim = EMBEDDER.name, EMBEDDER.dim, EMBEDDER.default_theta_sim

    def __init__(self) -> None:
        self.embedding, self.release = threading.Event(), threading.Event()

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.embedding.set()
        assert self.release.wait(30), "never released"
        return EMBEDDER.embed(texts)


def test_an_index_batch_embedding_while_its_user_is_erased_writes_none_of_theirs_back(tmp_path: Path) -> None:
    """The index agent does not hold the lock the ingest and forget agents share (streams/app.py): a
    batch checked before the tombstone and written after the erase would bring the user back."""
    store = EdgeStore(tmp_path / "store")
    store.ensure_collection(memories_spec(EMBEDDER.dim))
    forgotten: dict[bytes, list[float]] = {}
    now = [100.0]
    embedder = HeldEmbedder()

    def gone(key: bytes | None) -> Forgotten | None:
        return Forgotten.from_json(forgotten.get(key or b""))

    indexing = Indexing(Indexer(embedder).apply, lambda _: store, gone, lambda: now[0])
    barrier = ReadYourWrites(Takeover(Settings(), MEMORY_UPDATES.name), OwnWrites())
    forgetting = Forgetting(forgotten, [], barrier, lambda _: store, [MEMORIES], lambda: now[0])
    erased, other = memory(1, user="u1"), memory(2, user="u2")
    records = [
        Incoming.read(m.key.encode(), upsert(m).to_bytes(), MEMORY_UPDATES.name, 0, offset, timestamp=99.0)
        for offset, m in enumerate([erased, other])
    ]
    stone = Tombstone(
        tenant="t", user_id="u1", deleted_at=datetime.fromtimestamp(99.5, UTC), units=0, memories=0
    )

    async def run() -> None:
        batch = asyncio.ensure_future(indexing.batch(records))
        assert await asyncio.to_thread(embedder.embedding.wait, 30), "the batch never embedded"
        now[0] = 101.0
        tomb = Incoming.read(stone.key.encode(), stone.to_bytes(), TOMBSTONES.name, 0, 0, timestamp=99.5)
        await forgetting.tombstone(tomb)
        embedder.release.set()
        await batch

    asyncio.run(run())
    assert stored(store, erased) is None  # checked before the erase, written back after it: no more
    assert stored(store, other) == other  # another user's update in the same batch is written
    store.close()


def test_updates_stamped_after_their_user_was_erased_are_dropped_by_when_their_work_began(
    tmp_path: Path,
) -> None:
    """Consolidation asks whether its user is gone when it finishes, but does not hold the lock the
    forget agent takes: the tombstone can be handled while the updates are being sent, so they are
    stamped after the erase. They carry when their work began, and the indexer drops them."""
    store = EdgeStore(tmp_path / "store")
    store.ensure_collection(memories_spec(EMBEDDER.dim))
    forgotten: dict[bytes, list[float]] = {}
    now = [100.0]

    def gone(key: bytes | None) -> Forgotten | None:
        return Forgotten.from_json(forgotten.get(key or b""))

    barrier = ReadYourWrites(Takeover(Settings(), MEMORY_UPDATES.name), OwnWrites())
    step = Consolidating(lambda _: store, barrier, gone, lambda: False, lambda: now[0], 0.0)
    forgetting = Forgetting(forgotten, [], barrier, lambda _: store, [MEMORIES], lambda: now[0])
    indexing = Indexing(Indexer(EMBEDDER).apply, lambda _: store, gone, lambda: now[0])
    erased = memory(1, user="u1")
    request = Incoming.read(erased.key.encode(), b"{}", CONSOLIDATION.name, 0, 0, timestamp=99.0)
    done = step.finished(step.job(request, CONSOLIDATION.name), [upsert(erased)], "recurrence")
    assert isinstance(done, Done)  # the user is still there when the work finishes
    stone = Tombstone(
        tenant="t", user_id="u1", deleted_at=datetime.fromtimestamp(99.5, UTC), units=0, memories=0
    )
    sent: list[Incoming] = []

    async def send(
        topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]
    ) -> asyncio.Future[None]:
        now[0] = 101.0  # the tombstone, handled before this record is stamped
        await forgetting.tombstone(
            Incoming.read(key, stone.to_bytes(), TOMBSTONES.name, 0, 0, timestamp=99.5)
        )
        now[0] = 102.0
        sent.append(Incoming.read(key, value, topic, 0, len(sent), made_at(headers, now[0])))
        delivered = asyncio.get_running_loop().create_future()
        delivered.set_result(None)
        return delivered

    asyncio.run(Publisher(send, barrier.own)(done))
    assert [r.topic for r in sent] == [MEMORY_UPDATES.name]
    assert asyncio.run(indexing.batch(sent))[0] == Dropped("index", 1)
    assert stored(store, erased) is None
    store.close()


def test_re_queued_work_is_told_by_when_it_was_first_made() -> None:
    """Deferred work goes round the deferred topic and back to its own, a new record each time: it
    keeps the time of the work it came from (streams/decisions.MADE_AT), and is dropped once its
    user is deleted after that time, however late it comes round."""
    forgotten: dict[bytes, list[float]] = {b"t/gone": GONE.to_json()}
    barrier = ReadYourWrites(Takeover(Settings(), MEMORY_UPDATES.name), OwnWrites())

    async def no_wait(_: float) -> None:
        return None

    def no_store(_: int) -> VectorStore:
        raise AssertionError("no work is done here")

    async def no_durative(store: VectorStore, month: WindowClosed) -> list[MemoryUpdate]:
        raise AssertionError("no month is due here")

    step = Consolidating(
        no_store,
        barrier,
        lambda key: Forgotten.from_json(forgotten.get(key or b"")),
        lambda: False,
        lambda: 200.0,
        0.0,
        sleep=no_wait,
    )
    retries = Retries(step, no_durative)

    def round_trip(user: str, due: float) -> Decision:
        work = Deferred(
            source_topic=WINDOWS.name,
            key=f"t/{user}",
            value=b"{}",
            reason="llm_unavailable",
            not_before=datetime.fromtimestamp(due, UTC),
        )
        r = Incoming.read(work.key.encode(), work.to_bytes(), DEFERRED.name, 0, 0, timestamp=99.0)
        return asyncio.run(retries.deferred(r))

    assert round_trip("gone", due=150.0) == Dropped(DEFERRED.name)  # made at 99, erased at 100.4
    later, due = round_trip("kept", due=900.0), round_trip("kept", due=150.0)
    assert isinstance(later, Done) and [(s.topic, s.made_at) for s in later.sends] == [(DEFERRED.name, 99.0)]
    assert isinstance(due, Done) and [(s.topic, s.made_at) for s in due.sends] == [(WINDOWS.name, 99.0)]

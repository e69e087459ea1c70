"""memstream/core/forgetting.py: erasing a user's points, and which records of a deleted user are still
theirs."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memstream.adapters.store.edge import EdgeStore
from memstream.core.forgetting import Forgotten, erase_user, made_before, sent_before
from memstream.core.store import CollectionSpec, Point
from memstream.core.units import USER_FIELD

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

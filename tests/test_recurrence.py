"""RecMem recurrence counting, tested directly on plain data."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from memstream.core.recurrence import Neighbour, recurrence, top_k


def n(i: int, score: float, consolidated: bool = False) -> Neighbour:
    return Neighbour(f"u{i}", score, consolidated)


def test_fires_when_enough_similar_neighbours() -> None:
    hits = [n(i, 0.9 - i * 0.01) for i in range(5)] + [n(9, 0.2)]
    cluster = recurrence("t", hits, theta_sim=0.7, theta_count=5)
    assert cluster is not None
    assert cluster.unit_ids == ["t", "u0", "u1", "u2", "u3", "u4"]
    assert cluster.similarities[0] == 1.0
    assert "u9" not in cluster.unit_ids


def test_does_not_fire_below_count() -> None:
    hits = [n(i, 0.9) for i in range(4)] + [n(5, 0.69)]
    assert recurrence("t", hits, theta_sim=0.7, theta_count=5) is None


def test_threshold_is_inclusive() -> None:
    assert recurrence("t", [n(i, 0.7) for i in range(5)], theta_sim=0.7, theta_count=5) is not None


def test_consolidated_neighbours_do_not_count_until_new_members_join() -> None:
    old = [n(i, 0.95, consolidated=True) for i in range(8)]
    assert recurrence("t", old, 0.7, 5) is None
    fresh = old + [n(10 + i, 0.8) for i in range(5)]
    cluster = recurrence("t", fresh, 0.7, 5)
    assert cluster is not None
    assert set(cluster.unit_ids) == {"t", "u10", "u11", "u12", "u13", "u14"}


def test_trigger_never_counts_itself() -> None:
    hits = [Neighbour("t", 1.0, False)] + [n(i, 0.9) for i in range(4)]
    assert recurrence("t", hits, 0.7, 5) is None


def test_request_id_is_order_independent() -> None:
    a = recurrence("t", [n(i, 0.9 - i / 100) for i in range(5)], 0.7, 5)
    b = recurrence("t", [n(i, 0.9 - i / 100) for i in reversed(range(5))], 0.7, 5)
    assert a is not None and b is not None
    assert a.request_id == b.request_id


@given(
    scores=st.lists(st.tuples(st.floats(-1, 1), st.booleans()), max_size=20),
    theta_sim=st.floats(0, 1),
    theta_count=st.integers(1, 10),
)
def test_fires_iff_count_of_fresh_similar_reaches_theta(
    scores: list[tuple[float, bool]], theta_sim: float, theta_count: int
) -> None:
    hits = [n(i, s, c) for i, (s, c) in enumerate(scores)]
    expected = sum(1 for s, c in scores if s >= theta_sim and not c)
    cluster = recurrence("t", hits, theta_sim, theta_count)
    assert (cluster is not None) == (expected >= theta_count)
    if cluster is not None:
        assert len(cluster.members) == expected
        assert all(m.score >= theta_sim and not m.consolidated for m in cluster.members)
        assert [m.score for m in cluster.members] == sorted((m.score for m in cluster.members), reverse=True)


@given(
    scores=st.lists(st.sampled_from([0.5, 0.7, 0.9]), min_size=2, max_size=12),
    k=st.integers(1, 12),
    order=st.randoms(use_true_random=False),
)
def test_equal_scores_give_the_same_neighbours_and_cluster_in_any_order(
    scores: list[float], k: int, order: random.Random
) -> None:
    """The store returns ties in no fixed order: the same candidates make the same request."""
    hits = [n(i, s, False) for i, s in enumerate(scores)]
    shuffled = hits[:]
    order.shuffle(shuffled)
    assert top_k(shuffled, k) == top_k(hits, k)
    assert recurrence("t", shuffled, 0.5, 1) == recurrence("t", hits, 0.5, 1)

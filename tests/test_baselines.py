"""The eval's flat baselines (``memstream.apps.baselines``): orders, rendering, and a fill that fits the
budget."""

from __future__ import annotations

import random
from datetime import datetime

from hypothesis import given
from hypothesis import strategies as st

from memstream.apps.baselines import RawTurn, fill, min_max, rankings, render


def test_a_turn_is_one_dated_line() -> None:
    turn = RawTurn("D1:3", "Caroline: I went to the\nsupport group  yesterday.", datetime(2023, 5, 8, 13, 56))
    assert turn.line == "[8 May 2023] Caroline: I went to the support group yesterday."


def test_min_max_scales_to_the_unit_interval() -> None:
    assert min_max([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert min_max([1.0, 1.0]) == [0.0, 0.0]
    assert min_max([]) == []


def test_orders_by_hybrid_dense_and_bm25() -> None:
    t = datetime(2023, 5, 8)
    turns = [
        RawTurn("D1:1", "Ada: I love the mountains", t),
        RawTurn("D1:2", "Bo: my sourdough starter is alive", t),
        RawTurn("D1:3", "Ada: the weather was nice", t),
    ]
    cosines = [0.50, 0.45, 0.52]
    orders = rankings(turns, cosines, "How is the sourdough starter?")
    assert orders["dense"] == [2, 0, 1]
    assert orders["bm25"] == [1, 0, 2]  # ties (no query word) go to the earlier turn
    # 0.9 * cosine + 0.1 * BM25: 0.45 * 0.9 + 0.1 = 0.505 beats 0.52 * 0.9 = 0.468.
    assert orders["hybrid"] == [1, 2, 0]


def test_fill_skips_what_does_not_fit_and_counts_newlines() -> None:
    lines = ["a" * 8, "b" * 16, "c" * 7]
    assert fill(lines, [0, 1, 2], 4) == [0, 2]  # 8 + 1 + 7 = 16 characters; the 16 did not fit after 8
    assert fill(lines, [0, 2], 3) == [0]  # 8 + 1 + 7 = 16 > 12
    assert fill(lines, [1, 0], 4) == [1]
    assert render(lines, [2, 0]) == "ccccccc\naaaaaaaa"


@given(
    st.lists(st.text(alphabet="ab ", min_size=1, max_size=60), min_size=1, max_size=20),
    st.integers(min_value=0, max_value=120),
    st.randoms(use_true_random=False),
)
def test_a_filled_context_fits_its_budget(lines: list[str], budget: int, rng: random.Random) -> None:
    order = list(range(len(lines)))
    rng.shuffle(order)
    taken = fill(lines, order, budget)
    assert len(render(lines, taken)) <= budget * 4
    assert taken == [i for i in order if i in set(taken)]  # in the given order
    skipped = [i for i in order if i not in taken]
    # Nothing skipped would have fitted at the end.
    assert all(len(render(lines, taken)) + 1 + len(lines[i]) > budget * 4 for i in skipped)

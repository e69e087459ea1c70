"""The pure core of hierarchical recall (memstream.recall.rank), on small hand-made items."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstream.recall.rank import (
    BUDGETS,
    LEVEL_DECAY,
    Item,
    activate,
    bm25_scores,
    gate,
    keep_valid,
    leaf_scores,
    order,
    plan_complexity,
    propagate,
    render_context,
    temporal_rerank,
    tokens,
)

T0 = datetime(2023, 5, 8, 12, 0, tzinfo=UTC)
LEVELS = {
    "unit": 1,
    "episode": 1,
    "fact": 1,
    "session": 2,
    "day": 3,
    "week": 4,
    "profile": 5,
    "topic": 5,
    "persona": 5,
}


def item(
    id: str,
    kind: str = "unit",
    text: str = "x",
    *,
    start: datetime = T0,
    end: datetime | None = None,
    turns: tuple[str, ...] = (),
    parent: str | None = None,
    current: bool = True,
    dense: float = 0.0,
) -> Item:
    return Item(
        id=id,
        kind=kind,
        level=LEVELS[kind],
        text=text,
        start=start,
        end=end,
        recorded_at=start,
        source_turn_ids=turns,
        parent_id=parent,
        current=current,
        dense=dense,
    )


# --- plan_complexity ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "time_intent", "expected"),
    [
        ("What is Caroline's favourite colour?", False, "simple"),
        ("Where does Melanie live?", False, "simple"),
        ("How old is Jon?", False, "simple"),
        ("What did I eat last week?", True, "hybrid"),
        ("How many times did I go running?", False, "hybrid"),
        ("How often do we talk about books?", False, "hybrid"),
        ("Why did Caroline move to Porto?", False, "complex"),
        ("How did Jon feel about the new job?", False, "complex"),
        ("Compare my two trips to Spain", False, "complex"),
        ("Summarise what happened with the garden", False, "complex"),
        ("What changed over the last three months?", True, "complex"),
        ("I met Anna and then what did we do?", False, "complex"),
        ("After the concert, what did Melanie paint?", False, "complex"),
    ],
)
def test_plan_complexity(query: str, time_intent: bool, expected: str) -> None:
    assert plan_complexity(query, time_intent) == expected


# --- bm25 / leaf scores ---------------------------------------------------------------------------------


def test_bm25_prefers_the_doc_with_the_rare_query_word() -> None:
    docs = ["I went to the park today", "the park had a violin concert", "the park was sunny"]
    scores = bm25_scores("violin in the park", docs)
    assert scores[1] == 1.0
    assert scores[0] < scores[1] and scores[2] < scores[1]
    assert all(0.0 <= s <= 1.0 for s in scores)


def test_bm25_all_zero_and_empty() -> None:
    assert bm25_scores("zebra", ["a cat", "a dog"]) == [0.0, 0.0]
    assert bm25_scores("the what", ["the cat"]) == [0.0]  # stop words only
    assert bm25_scores("cat", []) == []
    assert bm25_scores("cat", ["", ""]) == [0.0, 0.0]


def test_leaf_scores_mix_dense_and_sparse() -> None:
    items = [item("a", text="violin lesson", dense=0.3), item("b", text="garden work", dense=0.6)]
    assert leaf_scores(items, "violin", lam=1.0) == [0.3, 0.6]
    assert leaf_scores(items, "violin", lam=0.0) == [1.0, 0.0]
    mixed = leaf_scores(items, "violin")
    assert mixed == pytest.approx([0.9 * 0.3 + 0.1, 0.9 * 0.6])


def test_activate_keeps_top_leaves_only() -> None:
    leaves = [item(f"u{n:02}", dense=n / 100) for n in range(30)]
    session = item("s", "session", dense=1.0)
    top = activate([*leaves, session], "anything", "simple")
    assert len(top) == BUDGETS["simple"][1] == 20
    assert [i.id for i, _ in top] == [f"u{n:02}" for n in range(29, 9, -1)]
    assert all(i.level == 1 for i, _ in top)


def test_activate_breaks_ties_by_id() -> None:
    top = activate([item("b", dense=0.5), item("a", dense=0.5)], "q", "complex")
    assert [i.id for i, _ in top] == ["a", "b"]


# --- propagate -------------------------------------------------------------------------------------------


def tree() -> dict[str, Item]:
    """profile <- week <- day <- {s1, s2, s3}; u1..u3 under s1..s3."""
    nodes = [
        item("p", "profile"),
        item("w", "week", parent="p"),
        item("d", "day", parent="w"),
        item("s1", "session", parent="d"),
        item("s2", "session", parent="d"),
        item("s3", "session", parent="d"),
        item("u1", parent="s1"),
        item("u2", parent="s2"),
        item("u3", parent="s3"),
    ]
    return {n.id: n for n in nodes}


def test_propagate_decays_per_level_and_takes_the_max() -> None:
    by_id = tree()
    activated = [(by_id["u1"], 1.0), (by_id["u2"], 0.5)]
    scores = {i.id: s for i, s in propagate(activated, by_id, "complex")}
    assert scores["u1"] == 1.0 and scores["u2"] == 0.5
    assert scores["s1"] == pytest.approx(LEVEL_DECAY)
    assert scores["s2"] == pytest.approx(0.5 * LEVEL_DECAY)
    assert scores["d"] == pytest.approx(LEVEL_DECAY**2)  # the max over its descendants, from u1
    assert scores["w"] == pytest.approx(LEVEL_DECAY**3)
    assert scores["p"] == pytest.approx(LEVEL_DECAY**4)
    assert "s3" not in scores  # not above an activated leaf


def test_propagate_respects_per_level_budgets() -> None:
    by_id = tree()
    activated = [(by_id["u1"], 0.9), (by_id["u2"], 0.8), (by_id["u3"], 0.7)]
    simple = [i.id for i, _ in propagate(activated, by_id, "simple")]
    # simple: L2 4, no L3 / L4, L5 1 -- the walk still passes through day and week to the profile
    assert simple == ["u1", "u2", "u3", "s1", "s2", "s3", "p"]
    hybrid = [i.id for i, _ in propagate(activated, by_id, "hybrid")]
    assert hybrid == ["u1", "u2", "u3", "s1", "s2", "s3", "d", "p"]

    many = {f"s{n}": item(f"s{n}", "session") for n in range(10)}
    leaves = [(item(f"u{n}", parent=f"s{n}"), 1 - n / 10) for n in range(10)]
    kept = propagate(leaves, many, "complex")
    sessions = [i.id for i, _ in kept if i.kind == "session"]
    assert sessions == [f"s{n}" for n in range(BUDGETS["complex"][2])]  # the 8 best


def test_propagate_survives_missing_parents_and_cycles() -> None:
    a = item("a", "session", parent="b")
    b = item("b", "day", parent="a")
    leaf = item("u", parent="a")
    orphan = item("o", parent="gone")
    out = propagate([(leaf, 1.0), (orphan, 0.5)], {"a": a, "b": b}, "complex")
    assert [i.id for i, _ in out] == ["u", "o", "a", "b"]


# --- temporal_rerank / keep_valid ------------------------------------------------------------------------


def test_rerank_puts_in_interval_items_first_then_score_then_closeness() -> None:
    inside_ids = {"in_low", "in_far", "in_near"}
    days = {"out_high": 0.0, "in_low": 0.0, "in_far": 5.0, "in_near": 1.0}
    scored = [
        (item("out_high"), 0.9),
        (item("in_low"), 0.2),
        (item("in_far"), 0.5),
        (item("in_near"), 0.5),
    ]
    out = temporal_rerank(scored, lambda i: i.id in inside_ids, lambda i: days[i.id])
    assert [i.id for i, _ in out] == ["in_near", "in_far", "in_low", "out_high"]


def test_keep_valid_drops_superseded_facts_except_for_change_questions() -> None:
    may = datetime(2023, 5, 1, tzinfo=UTC)
    june = datetime(2023, 6, 1, tzinfo=UTC)
    lisbon = item("lisbon", "fact", "lives in Lisbon", start=may, end=june, current=False)
    porto = item("porto", "fact", "lives in Porto", start=june)
    unit = item("u", current=False)  # only facts are filtered
    scored = [(lisbon, 0.9), (porto, 0.8), (unit, 0.1)]
    assert [i.id for i, _ in keep_valid(scored, False, None)] == ["porto", "u"]
    assert keep_valid(scored, True, None) == scored
    assert keep_valid(scored, True, may) == scored

    lisbon_current = item("lisbon", "fact", start=may, end=june)
    both = [(lisbon_current, 0.9), (porto, 0.8)]
    assert [i.id for i, _ in keep_valid(both, False, may + timedelta(days=3))] == ["lisbon"]
    assert [i.id for i, _ in keep_valid(both, False, june)] == ["porto"]  # end is exclusive


# --- gate ------------------------------------------------------------------------------------------------


def test_gate_drops_units_covered_by_a_kept_episode() -> None:
    episode = item("e", "episode", "e" * 8, turns=("t1", "t2"))
    covered = item("u1", "unit", "u" * 8, turns=("t1",))
    partly = item("u2", "unit", "u" * 8, turns=("t2", "t3"))
    fact = item("f", "fact", "f" * 8, turns=("t3",))
    later = item("u3", "unit", "u" * 8, turns=("t3",))  # a fact does not make a unit redundant
    out = gate([(episode, 1.0), (covered, 0.9), (partly, 0.8), (fact, 0.7), (later, 0.6)], 100)
    assert [i.id for i, _ in out] == ["e", "u2", "f", "u3"]


def test_gate_covers_only_with_kept_items() -> None:
    big = item("s", "session", "s" * 400, turns=("t1",))
    unit = item("u", "unit", "u" * 4, turns=("t1",))
    assert [i.id for i, _ in gate([(big, 1.0), (unit, 0.5)], 10)] == ["u"]


def test_gate_respects_the_budget_exactly_and_skips_what_does_not_fit() -> None:
    a = item("a", text="a" * 20)  # 5 tokens
    b = item("b", text="b" * 21)  # 6 tokens
    c = item("c", text="c" * 17)  # 5 tokens
    assert tokens(a.text) == 5 and tokens(b.text) == 6 and tokens(c.text) == 5
    assert [i.id for i, _ in gate([(a, 1.0), (b, 0.9), (c, 0.8)], 10)] == ["a", "c"]
    assert [i.id for i, _ in gate([(a, 1.0), (b, 0.9), (c, 0.8)], 11)] == ["a", "b"]
    assert gate([(a, 1.0)], 4) == []


# --- order / render --------------------------------------------------------------------------------------


def test_order_is_level_descending_then_chronological() -> None:
    day = timedelta(days=1)
    items = [
        item("u_late", start=T0 + day),
        item("u_early", start=T0),
        item("s", "session", start=T0),
        item("w", "week", start=T0 - 3 * day),
        item("p", "profile", start=T0 - 7 * day),
        item("d2", "day", start=T0 + day),
        item("d1", "day", start=T0),
    ]
    out = order([(i, 0.0) for i in items])
    assert [i.id for i, _ in out] == ["p", "w", "d1", "d2", "s", "u_early", "u_late"]


def test_render_context_formats_dates_in_the_zone() -> None:
    zone = ZoneInfo("Europe/Lisbon")
    week = item(
        "w",
        "week",
        "A busy week.",
        start=datetime(2023, 4, 30, 23, 0, tzinfo=UTC),  # 1 May 00:00 in Lisbon (WEST)
        end=datetime(2023, 5, 7, 23, 0, tzinfo=UTC),  # exclusive: 8 May 00:00 in Lisbon
    )
    unit = item("u", "unit", "I adopted\na cat.", start=datetime(2023, 5, 8, 9, 30, tzinfo=UTC))
    same_day = item(
        "s",
        "session",
        "Chat.",
        start=datetime(2023, 5, 8, 9, 0, tzinfo=UTC),
        end=datetime(2023, 5, 8, 10, 0, tzinfo=UTC),
    )
    text = render_context([(week, 1.0), (same_day, 0.5), (unit, 0.5)], zone)
    assert text.splitlines() == [
        "[week 1 May 2023 – 7 May 2023] A busy week.",
        "[session 8 May 2023] Chat.",
        "[unit 8 May 2023] I adopted a cat.",
    ]
    late = item("l", start=datetime(2023, 5, 8, 23, 30, tzinfo=UTC))  # already 9 May in Lisbon
    assert render_context([(late, 0.0)], zone) == "[unit 9 May 2023] x"
    assert render_context([], zone) == ""


# --- properties ------------------------------------------------------------------------------------------

KINDS = sorted(LEVELS)


@st.composite
def scored_items(draw: st.DrawFn) -> list[tuple[Item, float]]:
    n = draw(st.integers(0, 12))
    out = []
    for k in range(n):
        kind = draw(st.sampled_from(KINDS))
        text = "w" * draw(st.integers(0, 60))
        turns = tuple(draw(st.lists(st.sampled_from(["t1", "t2", "t3", "t4"]), max_size=3, unique=True)))
        start = T0 + timedelta(hours=draw(st.integers(-500, 500)))
        score = draw(st.floats(0.0, 1.0))
        out.append((item(f"i{k}", kind, text, start=start, turns=turns), score))
    return out


@given(scored_items(), st.integers(-5, 120))
def test_gate_never_exceeds_the_budget_and_keeps_input_order(
    scored: list[tuple[Item, float]], budget: int
) -> None:
    out = gate(scored, budget)
    assert sum(tokens(i.text) for i, _ in out) <= max(budget, 0)
    it = iter(scored)
    assert all(any(p is q for q in it) for p in out)  # a subsequence of the input


@given(scored_items(), st.integers(0, 2**32 - 1))
def test_temporal_rerank_is_a_permutation(scored: list[tuple[Item, float]], seed: int) -> None:
    out = temporal_rerank(scored, lambda i: hash((i.id, seed)) % 2 == 0, lambda i: float(len(i.text)))
    assert sorted(map(id, out)) == sorted(map(id, scored))
    assert temporal_rerank(out, lambda i: hash((i.id, seed)) % 2 == 0, lambda i: float(len(i.text))) == out


def test_order_puts_the_closest_in_time_first_within_a_level() -> None:
    t = datetime(2023, 5, 1, tzinfo=UTC)
    far = Item("a", "unit", 1, "x", t, None, t, ())
    near = Item("b", "unit", 1, "y", t + timedelta(days=30), None, t, ())
    week = Item("w", "week", 4, "z", t + timedelta(days=60), None, t, ())
    closeness = {"a": 1000.0, "b": 0.0, "w": 5.0}
    out = order([(far, 0.1), (near, 0.1), (week, 0.1)], lambda i: closeness[i.id])
    assert [i.id for i, _ in out] == ["w", "b", "a"]

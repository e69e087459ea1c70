"""The pure core of hierarchical recall (memstream.core.recall.rank), on small hand-made items."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstream.core.lexical import stem, tokenize
from memstream.core.recall import rank
from memstream.core.recall.config import DEFAULT
from memstream.core.recall.rank import (
    Item,
    Scored,
    ancestor_ids,
    asks_only,
    bm25_scores,
    charged_tokens,
    condensed,
    day_header,
    drop_phatic,
    header_tokens,
    keep_valid,
    leaf_scores,
    lift_sessions,
    line_tokens,
    order,
    phatic,
    plan_complexity,
    render_context,
    render_line,
    said_by,
    select,
    session_mass,
    smooth_neighbours,
    tokens,
    top,
    weigh_turns,
)
from memstream.core.sentences import is_small_talk

T0 = datetime(2023, 5, 8, 12, 0, tzinfo=UTC)
UTC_ZONE = ZoneInfo("UTC")
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
    text: str | None = None,
    *,
    start: datetime = T0,
    end: datetime | None = None,
    turns: tuple[str, ...] = (),
    parent: str | None = None,
    current: bool = True,
    dense: float = 0.0,
    session: str | None = None,
) -> Item:
    return Item(
        id=id,
        kind=kind,
        level=LEVELS[kind],
        text=f"the text of {id}" if text is None else text,  # its own words: select skips repeats
        start=start,
        end=end,
        recorded_at=start,
        source_turn_ids=turns,
        parent_id=parent,
        current=current,
        dense=dense,
        session_id=session,
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
    assert mixed == pytest.approx([DEFAULT.lam * 0.3 + (1 - DEFAULT.lam), DEFAULT.lam * 0.6])


def test_leaf_scores_meet_inflections_through_the_stemmed_share() -> None:
    items = [
        item("a", text="Melanie: camping at the beach", dense=0.5),
        item("b", text="Melanie: wow", dense=0.5),
    ]
    assert leaf_scores(items, "camped", lam=0.0, stemmed=0.0) == [0.0, 0.0]  # no word in common
    assert leaf_scores(items, "camped", lam=0.0, stemmed=0.5) == [0.5, 0.0]  # the stems meet
    assert leaf_scores(items, "camped", lam=0.0, stemmed=1.0) == [1.0, 0.0]
    exact = [item("c", text="camped by the lake"), item("d", text="camping by the lake")]
    assert leaf_scores(exact, "camped", lam=0.0, stemmed=0.5) == [1.0, 0.5]  # the word itself counts more


def test_bm25_counts_stop_words_in_neither_terms_nor_length() -> None:
    # "the" is a stop word: the two docs have the same length for BM25, so the same score.
    assert bm25_scores("the violin", ["violin", "the the the violin"]) == [1.0, 1.0]
    assert bm25_scores("violin", ["violin", "violin lesson today"])[1] < 1.0  # longer, same tf


def test_top_keeps_the_best_and_breaks_ties_by_id() -> None:
    scored = [(item(f"u{n:02}"), n / 100) for n in range(30)]
    assert [i.id for i, _ in top(scored, 3)] == ["u29", "u28", "u27"]
    assert [i.id for i, _ in top([(item("b"), 0.5), (item("a"), 0.5)], 5)] == ["a", "b"]


# --- smooth_neighbours ----------------------------------------------------------------------------------


def test_smoothing_lifts_the_turn_next_to_a_strong_one() -> None:
    minute = timedelta(minutes=1)
    question = item("q", start=T0, session="s1")  # "What pet do you have?"
    answer = item("a", start=T0 + minute, session="s1")  # "Two cats, Luna and Oliver"
    later = item("l", start=T0 + 2 * minute, session="s1")
    elsewhere = item("e", start=T0 + minute, session="s2")
    episode = item("ep", "episode", start=T0)  # no session: unchanged
    out = dict(
        (i.id, s)
        for i, s in smooth_neighbours(
            [(later, 0.1), (answer, 0.2), (question, 0.8), (elsewhere, 0.3), (episode, 0.5)], weight=0.5
        )
    )
    assert out["a"] == pytest.approx(0.2 + 0.5 * 0.8)  # the better neighbour, from the input scores
    assert out["q"] == pytest.approx(0.8 + 0.5 * 0.2)
    assert out["l"] == pytest.approx(0.1 + 0.5 * 0.2)  # its only neighbour is the answer, not the question
    assert out["e"] == 0.3 and out["ep"] == 0.5  # alone in its session; no session
    assert smooth_neighbours([]) == []


def test_smoothing_keeps_order_and_items() -> None:
    scored = [(item(f"u{n}", start=T0 + timedelta(minutes=n), session="s"), n / 10) for n in range(5)]
    out = smooth_neighbours(scored, weight=0.0)
    assert out == scored


# --- session_mass / lift_sessions ------------------------------------------------------------------------


def test_a_sessions_mass_is_the_mean_of_its_best_unit_scores() -> None:
    a1, a2, a3 = (item(f"a{n}", session="A") for n in (1, 2, 3))
    scored = [(a1, 0.5), (a2, 0.4), (a3, 0.1), (item("b1", session="B"), 0.55), (item("ep", "episode"), 0.9)]
    mass = session_mass(scored, depth=2)
    assert mass == pytest.approx({"A": (0.5 + 0.4) / 2, "B": 0.55 / 2})  # fewer units than depth: over depth
    assert session_mass([], depth=2) == {}


def test_lifting_sessions_lets_a_session_relevant_as_a_whole_pass_a_stray_turn() -> None:
    a1, a2 = item("a1", session="A"), item("a2", session="A")
    b1 = item("b1", session="B")  # matches as well alone, in a session about something else
    episode = item("ep", "episode")
    scored = [(a1, 0.5), (a2, 0.45), (b1, 0.55), (episode, 0.7)]
    out = dict((i.id, s) for i, s in lift_sessions(scored, {"A": 0.45, "B": 0.2}, weight=0.5))
    assert out == pytest.approx({"a1": 0.725, "a2": 0.675, "b1": 0.65, "ep": 0.7})
    assert out["a1"] > out["a2"] > out["b1"]
    assert lift_sessions(scored, {"A": 0.45, "B": 0.2}, weight=0.0) == scored
    assert lift_sessions(scored, {}, weight=0.5) == scored  # no session scored: as they are


@given(
    st.lists(st.tuples(st.sampled_from(["s1", "s2", "s3", None]), st.floats(0, 1)), max_size=12),
    st.floats(0, 1),
    st.integers(1, 5),
)
def test_lifting_sessions_keeps_the_order_within_a_session_and_lowers_nothing(
    units: list[tuple[str | None, float]], weight: float, depth: int
) -> None:
    scored = [(item(f"u{n}", session=session), s) for n, (session, s) in enumerate(units)]
    mass = session_mass(scored, depth)
    # a mean of equal scores may land one ulp above them (3 * x / 3)
    assert all(0 <= m <= max(s for _, s in scored) + 1e-12 for m in mass.values())
    out = lift_sessions(scored, mass, weight)
    assert [i for i, _ in out] == [i for i, _ in scored]
    lift = {i.session_id: after - before for (i, before), (_, after) in zip(scored, out, strict=True)}
    for (i, before), (_, after) in zip(scored, out, strict=True):
        assert after - before == pytest.approx(lift[i.session_id])  # one session, one lift: the same order
        assert after - before == pytest.approx(0.0 if i.session_id is None else weight * mass[i.session_id])


# --- ancestor_ids / select ----------------------------------------------------------------------------


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


def test_ancestor_ids_walk_up_and_survive_missing_parents_and_cycles() -> None:
    by_id = tree()
    assert ancestor_ids(by_id["u1"], by_id) == ["s1", "d", "w", "p"]
    assert ancestor_ids(item("o", parent="gone"), by_id) == []
    a = item("a", "session", parent="b")
    b = item("b", "day", parent="a")
    assert ancestor_ids(item("u", parent="a"), {"a": a, "b": b}) == ["a", "b"]


def sized(id: str, kind: str = "unit", size: int = 10, **kw: object) -> Item:
    """An item whose rendered line costs ``size`` tokens in the context (a node's prefix and the line
    break included; a leaf's day header is charged apart, ``DAY``)."""
    bare = item(id, kind, "", **kw)  # type: ignore[arg-type]
    overhead = len(render_line(bare, UTC_ZONE)) + 1
    assert 4 * size >= overhead, "too small for its [kind date] prefix or note"
    words = f"{id}q " * (4 * size)  # words of its own: no item says what another says (select skips that)
    sized_item = item(id, kind, words[: 4 * size - overhead], **kw)  # type: ignore[arg-type]
    assert line_tokens(sized_item, UTC_ZONE) == size
    return sized_item


# The header line "[8 May 2023]" that the leaves said at T0 share: charged once, with the first of them.
DAY = header_tokens(day_header(item("h"), UTC_ZONE))


def costs(scored: list[Scored]) -> int:
    return costs_in(scored, UTC_ZONE)


def ids(scored: list[Scored]) -> list[str]:
    return [i.id for i, _ in scored]


def test_select_takes_leaves_in_score_order_when_no_node_is_worth_more() -> None:
    session = sized("s", "session", 50)
    leaves = [(sized(f"u{n}", parent="s"), 1.0 - n / 10) for n in range(4)]
    out = select(leaves, {"s": session}, budget_tokens=30 + DAY, activated=3, zone=UTC_ZONE)
    # u0..u2 gain 0.3, 0.2, 0.1 over u3 (the best leaf left out); the session (50 tokens) would stand for
    # what does not fit, but does not fit itself.
    assert ids(out) == ["u0", "u1", "u2"]


def test_select_prefers_a_summary_of_many_relevant_leaves_that_do_not_fit() -> None:
    # Ten relevant units in session s (10 tokens each), a budget of 40 tokens: the session (20 tokens)
    # stands for the six that cannot fit, worth more than the two leaves its tokens would buy.
    session = sized("s", "session", 20)
    relevant = [(sized(f"u{n}", parent="s"), 0.9 - n / 100) for n in range(10)]
    noise = [(sized(f"n{n}"), 0.1) for n in range(5)]
    out = select([*relevant, *noise], {"s": session}, budget_tokens=40 + DAY, activated=10, zone=UTC_ZONE)
    assert "s" in ids(out)
    assert costs(out) <= 40 + DAY
    assert ids(out)[0] == "s" and ids(out)[1:] == ["u0", "u1"]
    score = dict((i.id, s) for i, s in out)["s"]
    assert score == pytest.approx(0.9 * DEFAULT.level_decay)  # the best activated leaf below it, one level up


def test_select_does_not_keep_a_node_for_leaves_a_kept_node_stands_for() -> None:
    by_id = tree()
    by_id = {k: sized(k, v.kind, 10, parent=v.parent_id) for k, v in by_id.items()}  # 10 tokens each
    leaves = [(sized("u1", parent="s1", size=30), 0.9), (sized("u2", parent="s2", size=30), 0.8)]
    leaves += [(sized(f"n{n}", size=5), 0.1) for n in range(3)]
    out = select(leaves, by_id, budget_tokens=25 + DAY, activated=2, zone=UTC_ZONE)
    # The units (30 tokens) cannot fit. The day, week and profile each stand for both (gains 0.8 and 0.7
    # over the best leaf left out) at 10 tokens; the smallest id wins the tie. Once it is kept no other node
    # stands for anything, and the small leaves fill the rest.
    assert ids(out) == ["d", "n0", "n1", "n2"]


def test_select_puts_items_inside_the_asked_time_first() -> None:
    leaves = [(sized("out"), 0.9), (sized("in1"), 0.2), (sized("in2"), 0.1)]
    out = select(leaves, {}, budget_tokens=20 + DAY, inside=lambda i: i.id.startswith("in"), zone=UTC_ZONE)
    assert ids(out) == ["in1", "in2"]


def test_select_restricts_levels() -> None:
    session = sized("s", "session", 10)
    leaves = [(sized(f"u{n}", parent="s"), 1.0 - n / 10) for n in range(4)]
    assert ids(select(leaves, {"s": session}, 100, levels={1}, zone=UTC_ZONE)) == ["u0", "u1", "u2", "u3"]
    assert ids(select(leaves, {"s": session}, 100, levels={2}, zone=UTC_ZONE)) == ["s"]
    assert select(leaves, {"s": session}, 100, levels={3}, zone=UTC_ZONE) == []


def test_select_fills_a_large_budget_with_every_leaf_then_the_activated_leaves_ancestors() -> None:
    by_id = tree()
    leaves = [(by_id["u1"], 0.9), (by_id["u2"], 0.5)]
    out = select(leaves, by_id, budget_tokens=1000, activated=1, zone=UTC_ZONE)
    assert ids(out)[:2] == ["u1", "u2"]
    assert set(ids(out)[2:]) == {"s1", "d", "w", "p"}  # above u1 only: u2 is not activated
    assert ids(out)[2] == "s1"  # closest to the leaf first


def test_select_ignores_tree_nodes_passed_as_leaves_and_is_deterministic() -> None:
    leaves = [(sized("b"), 0.5), (sized("a"), 0.5), (sized("s", "session"), 1.0)]
    assert ids(select(leaves, {}, 100, zone=UTC_ZONE)) == ["a", "b"]


# --- keep_valid ------------------------------------------------------------------------------------------


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
        "[8 May 2023]",
        "I adopted a cat.",
    ]
    late = item("l", text="x", start=datetime(2023, 5, 8, 23, 30, tzinfo=UTC))  # already 9 May in Lisbon
    assert render_context([(late, 0.0)], zone) == "[9 May 2023]\nx"
    assert render_context([], zone) == ""


def test_the_leaves_of_a_day_share_one_header_where_the_first_of_them_stands() -> None:
    day = timedelta(days=1)
    a, b = item("a", text="First.", start=T0), item("b", text="Second.", start=T0 + timedelta(hours=2))
    c = item("c", "fact", "Holds.", start=T0 + day)
    session = item("s", "session", "Chat.", start=T0)
    # b is rendered under a's header though c comes between them: one header per day, whatever the order.
    text = render_context([(session, 0.5), (a, 0.9), (c, 0.8), (b, 0.7)], UTC_ZONE)
    assert text.splitlines() == [
        "[session 8 May 2023] Chat.",
        "[8 May 2023]",
        "First.",
        "Second.",
        "[9 May 2023]",
        "Holds.",
    ]
    assert tokens(text) <= charged_tokens([(session, 0.5), (a, 0.9), (c, 0.8), (b, 0.7)], UTC_ZONE)


# --- properties ------------------------------------------------------------------------------------------

KINDS = sorted(LEVELS)
# Zones whose offsets move dates across midnight in both directions, with DST and half-hour offsets.
ZONES = [
    "UTC",
    "Pacific/Kiritimati",
    "Pacific/Pago_Pago",
    "Asia/Kathmandu",
    "America/St_Johns",
    "Europe/Lisbon",
]
# Any text a memory may hold: words, runs of spaces, tabs and line breaks (folded when rendered), non-ASCII.
TEXTS = st.lists(
    st.sampled_from(["w", "ab ", " ", "  ", "\n", "\t", "é", "日本", "-", "1"]), max_size=40
).map("".join) | st.text(max_size=120)


@st.composite
def scored_items(draw: st.DrawFn) -> list[tuple[Item, float]]:
    n = draw(st.integers(0, 14))
    out = []
    for k in range(n):
        kind = draw(st.sampled_from(KINDS))
        turns = tuple(draw(st.lists(st.sampled_from(["t1", "t2", "t3", "t4"]), max_size=3, unique=True)))
        start = T0 + timedelta(minutes=draw(st.integers(-600_000, 600_000)))
        # No end, an end before the start, an instant, or a span of up to a year and more (long date ranges).
        end = draw(st.none() | st.integers(-10_000, 800_000).map(lambda m, s=start: s + timedelta(minutes=m)))
        score = draw(st.floats(0.0, 1.0))
        drawn = item(f"i{k}", kind, draw(TEXTS), start=start, end=end, turns=turns)
        out.append((replace(drawn, brief=draw(TEXTS)) if kind == "unit" else drawn, score))
    return out


def linked_tree(scored: list[tuple[Item, float]]) -> tuple[list[Scored], dict[str, Item]]:
    """Every leaf linked to some node, and nodes into a chain, so propagation has something to do."""
    leaves = [p for p in scored if p[0].level == 1]
    nodes = {i.id: i for i, _ in scored if i.level > 1}
    node_ids = sorted(nodes)
    nodes = {
        n: Item(**{**nodes[n].__dict__, "parent_id": node_ids[k + 1] if k + 1 < len(node_ids) else None})
        for k, n in enumerate(node_ids)
    }
    linked = [
        (Item(**{**i.__dict__, "parent_id": node_ids[k % len(node_ids)] if node_ids else None}), s)
        for k, (i, s) in enumerate(leaves)
    ]
    return linked, nodes


@given(
    scored_items(),
    st.integers(-5, 400),
    st.integers(0, 12),
    st.sampled_from(ZONES),
    st.booleans(),
    st.sampled_from([0.5, 0.9, 2.0]),
    st.booleans(),
)
def test_the_rendered_context_never_exceeds_the_budget(
    scored: list[tuple[Item, float]],
    budget: int,
    activated: int,
    zone_name: str,
    leaves_only: bool,
    covered: float,
    briefs: bool,
) -> None:
    """What the agent reads, ``render_context`` of the ordered selection, is at most ``budget`` tokens
    by ``tokens``, whatever the texts, dates, zone and levels, and with leaves dropped when said again
    (``covered``) and briefs filling what is left."""
    zone = ZoneInfo(zone_name)
    linked, nodes = linked_tree(scored)
    out = select(
        linked,
        nodes,
        budget,
        activated=activated,
        levels={1} if leaves_only else None,
        zone=zone,
        covered=covered,
        briefs=briefs,
    )
    context = render_context(order(out), zone)
    assert tokens(context) <= max(budget, 0)
    assert costs_in(out, zone) <= max(budget, 0)  # what select charged, which bounds the context
    assert tokens(render_context(out, zone)) <= costs_in(out, zone)  # in any order
    headers = [line for line in context.splitlines() if line.startswith("[") and line.endswith("]")]
    assert len(headers) == len(set(headers))  # one header per day


def costs_in(scored: list[Scored], zone: ZoneInfo) -> int:
    return charged_tokens(scored, zone)


@given(scored_items(), st.integers(-5, 400), st.integers(0, 12), st.sampled_from([0.5, 0.9, 2.0]))
def test_select_returns_each_item_once_and_only_known_items(
    scored: list[tuple[Item, float]], budget: int, activated: int, covered: float
) -> None:
    linked, nodes = linked_tree(scored)
    out = select(linked, nodes, budget, activated=activated, zone=UTC_ZONE, covered=covered)
    assert len({i.id for i, _ in out}) == len(out)
    assert {i.id for i, _ in out} <= {i.id for i, _ in linked} | set(nodes)


def test_a_leaf_costs_its_line_and_its_days_header_once() -> None:
    unit = item("u", text="I adopted\na cat.", start=datetime(2023, 5, 8, 9, 30, tzinfo=UTC))
    assert day_header(unit, UTC_ZONE) == "[8 May 2023]"  # 12 characters and the break: 4 tokens
    assert render_line(unit, UTC_ZONE) == "I adopted a cat."  # 16 characters and the break: 5 tokens
    assert line_tokens(unit, UTC_ZONE) == 5 and DAY == 4
    # A budget that holds the line alone but not its header does not take it.
    assert select([(unit, 1.0)], {}, 8, zone=UTC_ZONE) == []
    assert select([(unit, 1.0)], {}, 9, zone=UTC_ZONE) == [(unit, 1.0)]
    # A second leaf of the same day costs its line only; one of another day pays its own header.
    same_day = item("v", text="I adopted a dog.", start=datetime(2023, 5, 8, 11, 0, tzinfo=UTC))
    next_day = item("w", text="I adopted a rat.", start=datetime(2023, 5, 9, 11, 0, tzinfo=UTC))
    assert ids(select([(unit, 1.0), (same_day, 0.9)], {}, 14, zone=UTC_ZONE)) == ["u", "v"]
    assert ids(select([(unit, 1.0), (next_day, 0.9)], {}, 14, zone=UTC_ZONE)) == ["u"]
    assert ids(select([(unit, 1.0), (next_day, 0.9)], {}, 18, zone=UTC_ZONE)) == ["u", "w"]


def test_line_breaks_between_items_are_charged() -> None:
    # The header (12 characters, 3 tokens alone) and lines of 8 (2 tokens alone): counted without their
    # breaks, both leaves would cost 7, but the context of both is 30 characters, 8 tokens. With the
    # breaks charged (4 + 3 + 3), a budget of 7 holds one.
    a, b = item("a", text="abcdefgh"), item("b", text="ijklmnop")
    out = select([(a, 1.0), (b, 0.9)], {}, 7, zone=UTC_ZONE)
    assert ids(out) == ["a"]
    assert tokens(render_context(out, UTC_ZONE)) == 6
    assert tokens(render_context([(a, 1.0), (b, 0.9)], UTC_ZONE)) == 8


WORDS = ["camp", "camped", "camping", "camps", "city", "cities", "dance", "x"]


@given(
    st.lists(st.lists(st.sampled_from(WORDS)), max_size=8),
    st.lists(st.sampled_from(["camping", "cities", "danced", "x", "the"]), min_size=1, max_size=4),
)
def test_the_stemmed_bm25_counts_each_stem_as_stemming_every_word(
    docs: list[list[str]], query: list[str]
) -> None:
    """leaf_scores counts a stem as the sum of the counts of the candidates' words with that stem: the
    same as BM25 over every document stemmed word by word (what it computed before), to the bit."""
    items = [item(f"u{n}", text=" ".join(words)) for n, words in enumerate(docs)]
    q = " ".join(query)
    words = [tokenize(i.text) for i in items]
    stemmed = rank._bm25([stem(t) for t in tokenize(q)], [[stem(t) for t in w] for w in words])
    plain = rank._bm25(tokenize(q), words)
    lexical = [(1 - 0.5) * p + 0.5 * s for p, s in zip(plain, stemmed, strict=True)]
    expected = [0.7 * i.dense + (1 - 0.7) * s for i, s in zip(items, lexical, strict=True)]
    assert leaf_scores(items, q, lam=0.7, stemmed=0.5) == expected


def test_phatic_units_state_fewer_than_three_content_words() -> None:
    thanks = item("t", text="Jon: Thanks, Gina!")  # the speaker's name is not counted
    bye = item("b", text="Gina: Bye! See you.")
    cats = item("c", text="Gina: Two cats, Luna and Oliver.")
    summary = item("s", "session", text="Thanks!")
    assert phatic(thanks) and phatic(bye)
    assert not phatic(cats) and not phatic(summary)  # only units are judged
    assert drop_phatic([(thanks, 0.9), (cats, 0.5), (summary, 0.4)]) == [(cats, 0.5), (summary, 0.4)]


def test_a_units_event_time_is_rendered_when_it_is_not_the_day_it_was_said() -> None:
    said = datetime(2023, 5, 25, 15, 0, tzinfo=UTC)
    saturday = (datetime(2023, 5, 20, tzinfo=UTC), datetime(2023, 5, 21, tzinfo=UTC), "day")
    last_year = (datetime(2022, 1, 1, tzinfo=UTC), datetime(2023, 1, 1, tzinfo=UTC), "year")
    today = (datetime(2023, 5, 25, tzinfo=UTC), datetime(2023, 5, 26, tzinfo=UTC), "day")
    ran = replace(item("r", text="I ran a race last Saturday."), start=said, event_times=(saturday, today))
    assert render_line(ran, UTC_ZONE) == "I ran a race last Saturday. (about 20 May 2023)"
    old = replace(item("o", text="A trip last year."), start=said, event_times=(last_year,))
    assert render_line(old, UTC_ZONE) == "A trip last year. (about 2022)"
    now = replace(item("n", text="Today."), start=said, event_times=(today,))
    assert render_line(now, UTC_ZONE) == "Today."
    assert render_context([(ran, 1.0)], UTC_ZONE).splitlines()[0] == "[25 May 2023]"  # the day it was said
    assert line_tokens(ran, UTC_ZONE) == tokens(render_line(ran, UTC_ZONE) + "\n")  # the note is charged


def test_order_puts_the_closest_in_time_first_within_a_level() -> None:
    t = datetime(2023, 5, 1, tzinfo=UTC)
    far = Item("a", "unit", 1, "x", t, None, t, ())
    near = Item("b", "unit", 1, "y", t + timedelta(days=30), None, t, ())
    week = Item("w", "week", 4, "z", t + timedelta(days=60), None, t, ())
    closeness = {"a": 1000.0, "b": 0.0, "w": 5.0}
    out = order([(far, 0.1), (near, 0.1), (week, 0.1)], lambda i: closeness[i.id])
    assert [i.id for i, _ in out] == ["w", "b", "a"]


def test_select_skips_a_leaf_that_says_nothing_the_context_does_not_say_already() -> None:
    """An episode that quotes a unit whole, then the unit: the unit would spend its line on words the
    context holds, so the budget goes to the next leaf."""
    episode = item("e", "episode", "On 8 May 2023, Ann: I adopted a grey cat named Miso yesterday. So happy!")
    unit = item("u", "unit", "Ann: I adopted a grey cat named Miso yesterday.")
    other = item("o", "unit", "Ann: the vet says Miso is healthy.")
    leaves = [(episode, 0.9), (unit, 0.8), (other, 0.7)]
    assert ids(select(leaves, {}, 1000, zone=UTC_ZONE)) == ["e", "o"]
    never = {"contained": 1.01, "covered": 2.0}
    assert ids(select(leaves, {}, 1000, zone=UTC_ZONE, **never)) == ["e", "u", "o"]


def test_a_kept_leaf_said_again_by_a_later_one_gives_its_tokens_back() -> None:
    """A fact, then the turn that said it: the fact's words (its date in the turn's day header) are all
    in the turn, so the fact goes and the budget it held takes the next leaf. With ``covered`` above 1
    the fact stays and the next leaf does not fit."""
    fact = item("f", "fact", "Ann adopted a grey cat named Miso (7 May 2023).")
    unit = item("u", "unit", "Ann: I adopted a grey cat named Miso yesterday, she sleeps all day.")
    other = item("o", "unit", "Ann: the vet says Miso is healthy.")
    leaves = [(fact, 0.9), (unit, 0.8), (other, 0.7)]
    budget = charged_tokens([(fact, 0.9), (unit, 0.8)], UTC_ZONE)
    assert charged_tokens([(unit, 0.8), (other, 0.7)], UTC_ZONE) <= budget  # the fact's tokens hold the other
    assert ids(select(leaves, {}, budget, zone=UTC_ZONE, covered=0.9)) == ["u", "o"]
    assert ids(select(leaves, {}, budget, zone=UTC_ZONE, covered=2.0)) == ["f", "u"]
    # An episode that quotes the turn whole says more than it: the turn goes, the episode holds it.
    quoted = item("q", "unit", "Ann: I adopted a grey cat named Miso yesterday.")
    episode = item(
        "e", "episode", "On 8 May 2023, Ann: I adopted a grey cat named Miso yesterday. She purrs all day!"
    )
    assert ids(select([(quoted, 0.9), (episode, 0.8)], {}, 1000, zone=UTC_ZONE)) == ["e"]
    assert ids(select([(quoted, 0.9), (episode, 0.8)], {}, 1000, zone=UTC_ZONE, covered=2.0)) == ["q", "e"]


def test_a_leaf_that_only_differs_by_its_day_is_not_a_repeat() -> None:
    """The same words said on another day add that day: neither is skipped nor dropped."""
    first = item("a", "unit", "Ann: I went running with my sister.")
    again = item("b", "unit", "Ann: I went running with my sister.", start=T0 + timedelta(days=30))
    assert ids(select([(first, 0.9), (again, 0.8)], {}, 1000, zone=UTC_ZONE)) == ["a", "b"]


def test_the_budget_left_goes_to_the_brief_of_a_unit_that_did_not_fit() -> None:
    """A long turn that does not fit whole is returned as its sentence nearest the query when that fits
    in what the leaves that fit left; never in place of a leaf that fits whole."""
    short = item("s", "unit", "Ann: the vet says Miso is healthy.")
    said = "Ann: " + " ".join(f"Sentence {k} about the garden and its roses." for k in range(30))
    long = replace(item("l", "unit", said), brief="Ann: I adopted a grey cat named Miso.")
    budget = charged_tokens([(short, 0.9)], UTC_ZONE) + 15
    out = select([(long, 0.95), (short, 0.9)], {}, budget, zone=UTC_ZONE, briefs=True)
    assert [(i.id, i.text) for i, _ in out] == [("s", short.text), ("l", long.brief)]
    assert charged_tokens(out, UTC_ZONE) <= budget
    assert ids(select([(long, 0.95), (short, 0.9)], {}, budget, zone=UTC_ZONE, briefs=False)) == ["s"]
    # No room left for the brief either: only the short turn.
    tight = charged_tokens([(short, 0.9)], UTC_ZONE)
    assert ids(select([(long, 0.95), (short, 0.9)], {}, tight, zone=UTC_ZONE, briefs=True)) == ["s"]


# --- condensed: a unit without its small talk ----------------------------------------------------------


def test_a_unit_is_returned_without_its_small_talk_and_keeps_its_caption() -> None:
    said = "Wow, Caroline! Thanks! I ran a charity race last week. [shares a photo: runners at a start line]"
    unit = item("u1", text=f"Melanie: {said}", turns=("D1:3",))
    short = condensed(unit)
    assert short.text == "Melanie: I ran a charity race last week. [shares a photo: runners at a start line]"
    assert (short.id, short.source_turn_ids, short.start) == (unit.id, unit.source_turn_ids, unit.start)
    assert line_tokens(short, UTC_ZONE) < line_tokens(unit, UTC_ZONE)  # the budget holds more turns


@pytest.mark.parametrize(
    "text",
    [
        "Melanie: I ran a charity race last week and raised money for the shelter.",  # nothing to drop
        "Melanie: Thanks, Caroline! Bye!",  # small talk only: kept whole (rank.phatic drops it)
    ],
)
def test_a_unit_with_nothing_or_only_small_talk_to_drop_is_unchanged(text: str) -> None:
    unit = item("u1", text=text)
    assert condensed(unit) is unit


def test_condensed_leaves_memories_as_they_are_and_condenses_each_line_of_a_unit() -> None:
    fact = item("f1", "fact", text="Thanks! Melanie ran a charity race.")
    assert condensed(fact) is fact
    unit = item(
        "u1", text="Melanie: Hi Jon! I moved to Porto in May.\nJon: Great! Did you find a flat there?"
    )
    assert condensed(unit).text == "Melanie: I moved to Porto in May.\nJon: Did you find a flat there?"


@pytest.mark.parametrize(
    ("sentence", "small_talk"),
    [
        ("Thanks, Mel!", True),
        ("Hey Caroline!", True),
        ("That's great, Mel!", True),
        ("How's it going?", True),
        ("Bye!", True),
        ("Luna and Oliver!", False),  # a short answer names two things
        ("Yeah, I play clarinet!", False),
        ("I ran a charity race last week.", False),
    ],
)
def test_small_talk_is_trivial_and_names_at_most_one_thing(sentence: str, small_talk: bool) -> None:
    assert is_small_talk(sentence) is small_talk


def test_a_short_answer_in_a_unit_is_not_small_talk() -> None:
    unit = item("u1", text="Melanie: Luna and Oliver! They are so sweet and playful.")
    assert condensed(unit) is unit


# --- asks_only / weigh_turns ------------------------------------------------------------------------------


def test_asks_only_tells_a_turn_that_only_asks_from_one_that_tells() -> None:
    assert asks_only(item("q", text="Melanie: What kind of books have you got?"))
    assert asks_only(item("w", text="Melanie: Wow, Caroline! What did you paint?"))  # small talk aside
    assert not asks_only(item("t", text="Caroline: I painted a lake at dawn. What about you?"))
    assert not asks_only(item("p", text="Melanie: Look at this! [shares a photo: a dog on a beach] Cute?"))
    assert not asks_only(item("s", text="Jon: Thanks, Gina!"))  # small talk only: phatic's job
    assert not asks_only(item("f", "fact", text="What did Jon open?"))  # only units are judged


def speaking(id: str, speaker: str, said: str) -> Item:
    return item(id, text=f"{speaker}: {said}")


def test_weigh_turns_lifts_the_named_speakers_turns_and_lowers_turns_that_only_ask() -> None:
    hers = speaking("m", "Melanie", "I read Charlotte's Web as a kid.")
    his = speaking("c", "Caroline", "I read lots of classics to my kids.")
    asks = speaking("a", "Caroline", "Which books did you read as a kid?")
    fact = item("f", "fact", text="Melanie read Charlotte's Web.")
    scored = [(hers, 0.5), (his, 0.6), (asks, 0.8), (fact, 0.4)]
    out = dict(
        (i.id, s) for i, s in weigh_turns(scored, ["Melanie"], speaker_weight=0.2, question_weight=0.5)
    )
    assert out == pytest.approx({"m": 0.6, "c": 0.6, "a": 0.4, "f": 0.4})
    assert weigh_turns(scored, [], speaker_weight=0.2, question_weight=0.0) == scored  # no name: as they are


def test_a_units_speakers_open_its_lines() -> None:
    assert said_by(item("u", text="Jon: I opened a studio.\nGina: At last: congrats!")) == {"Jon", "Gina"}
    assert said_by(item("n", text="no speaker here")) == set()
    assert said_by(item("f", "fact", text="Jon: a fact that reads like a turn")) == set()


@given(
    st.lists(st.tuples(st.sampled_from(["Ann", "Bo"]), st.floats(0, 1), st.booleans()), max_size=12),
    st.floats(0, 1),
    st.floats(0, 1),
)
def test_weigh_turns_scales_each_turn_and_keeps_the_order_within_a_kind_of_turn(
    turns: list[tuple[str, float, bool]], speaker_weight: float, question_weight: float
) -> None:
    scored = [
        (
            speaking(
                f"u{n}", who, "Where did you go last week?" if asks else "I went to the lake last week."
            ),
            s,
        )
        for n, (who, s, asks) in enumerate(turns)
    ]
    out = weigh_turns(scored, ["Ann"], speaker_weight, question_weight)
    assert [i for i, _ in out] == [i for i, _ in scored]
    assert weigh_turns(scored, ["Ann"], 0.0, 0.0) == scored
    for (_, before), (_, after), (who, _, asks) in zip(scored, out, turns, strict=True):
        factor = (1 + speaker_weight if who == "Ann" else 1.0) * (1 - question_weight if asks else 1.0)
        assert after == pytest.approx(before * factor)

"""The agent tools: the pure core directly (with hypothesis properties), then the store shell on a real
Qdrant Edge store, hand-built (two users with identical memories) and built by the pipeline."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, get_args

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.adapters.store.edge import EdgeStore
from memstream.core.memories import memories_spec, memory_payload
from memstream.core.recall import rank
from memstream.core.recall.time_intent import Interval, TimeIntent, contains
from memstream.core.recall.tools import (
    RUNNERS,
    contexts,
    entity_filter,
    in_time,
    lexical_rank,
    order_and_page,
    run_tool,
)
from memstream.core.store import Point, VectorStore
from memstream.core.unit_views import views_spec
from memstream.core.units import unit_payload, units_spec
from memstream.schemas.events import Unit, unit_id_for
from memstream.schemas.memory import LEVEL, FactType, Memory, MemoryKind, Triple, memory_id
from memstream.schemas.tools import TOOLS, OrderBy, TimeOp, ToolKind, ToolResult, openai_tools
from tests.test_consolidation import TURNS

T0 = datetime(2023, 5, 1, tzinfo=UTC)
OPS: tuple[TimeOp, ...] = get_args(TimeOp)

# --- in_time ------------------------------------------------------------------------------------------------


def day(n: float) -> datetime:
    return T0 + timedelta(days=n)


@pytest.mark.parametrize(
    ("start", "end", "op", "open_end", "expected"),
    [
        # window [day 2, day 5)
        (day(3), None, "within", False, True),  # an instant inside
        (day(5), None, "overlaps", False, False),  # the window's end is exclusive
        (day(2), None, "overlaps", False, True),  # its start inclusive
        (day(1), day(3), "overlaps", False, True),
        (day(1), day(3), "within", False, False),  # sticks out on the left
        (day(2), day(5), "within", False, True),
        (day(1), day(2), "overlaps", False, False),  # touching is not overlapping (end exclusive)
        (day(1), day(2), "before", False, True),  # ... it is before
        (day(1), day(3), "before", False, False),
        (day(1.5), None, "before", False, True),
        (day(2), None, "before", False, False),
        (day(5), None, "after", False, True),
        (day(4), day(9), "after", False, False),
        (day(1), None, "overlaps", True, True),  # a fact from day 1 that still holds
        (day(1), None, "within", True, False),  # ... never ends, so is not within
        (day(1), None, "before", True, False),
        (day(6), None, "after", True, True),
        (day(3), day(3), "within", False, True),  # a zero-length interval is an instant
    ],
)
def test_in_time_examples(
    start: datetime, end: datetime | None, op: TimeOp, open_end: bool, expected: bool
) -> None:
    assert in_time(start, end, day(2), day(5), op, open_end=open_end) is expected


def test_in_time_open_windows_and_missing_time() -> None:
    assert in_time(None, None, None, None, "within")  # no window: no filter
    assert not in_time(None, None, day(0), None, "overlaps")  # no time never matches a window
    # "after day 2" and "before day 2" need one bound, either one.
    assert in_time(day(3), None, day(2), None, "after") and in_time(day(3), None, None, day(2), "after")
    assert in_time(day(1), None, day(2), None, "before") and in_time(day(1), None, None, day(2), "before")
    assert in_time(day(9), day(10), day(2), None, "within")  # no upper bound
    assert not in_time(day(1), day(10), day(2), None, "within")


days = st.integers(min_value=0, max_value=40).map(day)


@st.composite
def item_times(draw: st.DrawFn) -> tuple[datetime, datetime | None, bool]:
    """(start, end, open_end): an instant, a bounded interval, or an unended one."""
    start = draw(days)
    shape = draw(st.sampled_from(["instant", "interval", "unended"]))
    if shape == "interval":
        return start, start + timedelta(days=draw(st.integers(1, 10))), False
    return start, None, shape == "unended"


@st.composite
def windows(draw: st.DrawFn) -> tuple[datetime, datetime]:
    lo = draw(days)
    return lo, lo + timedelta(days=draw(st.integers(1, 10)))


@given(item_times(), windows())
def test_a_bounded_window_splits_items_into_before_overlapping_after(
    item: tuple[datetime, datetime | None, bool], window: tuple[datetime, datetime]
) -> None:
    start, end, open_end = item
    trichotomy: tuple[TimeOp, ...] = ("before", "overlaps", "after")
    matched = [op for op in trichotomy if in_time(start, end, *window, op, open_end=open_end)]
    assert len(matched) == 1, matched
    if in_time(start, end, *window, "within", open_end=open_end):
        assert matched == ["overlaps"]


@given(item_times(), st.none() | days, st.none() | days)
def test_within_implies_overlaps_and_no_window_matches_everything(
    item: tuple[datetime, datetime | None, bool], lo: datetime | None, hi: datetime | None
) -> None:
    start, end, open_end = item
    if in_time(start, end, lo, hi, "within", open_end=open_end):
        assert in_time(start, end, lo, hi, "overlaps", open_end=open_end)
    assert all(in_time(start, end, None, None, op, open_end=open_end) for op in OPS)


@given(item_times(), windows(), st.sampled_from(["within", "before", "after"]))
def test_in_time_agrees_with_recall_time_intent(
    item: tuple[datetime, datetime | None, bool], window: tuple[datetime, datetime], relation: Any
) -> None:
    """Instants and bounded intervals are read as recall reads a query's intent (its within = overlaps)."""
    start, end, _ = item
    intent = TimeIntent((Interval(*window),), relation, False, ())
    op: TimeOp = "overlaps" if relation == "within" else relation
    assert in_time(start, end, *window, op) == contains(intent, start, end)


# --- entity_filter, order_and_page, lexical_rank, contexts --------------------------------------------------

TENANT = "acme"


def fact(
    user: str, s: str, p: str, o: str, start: datetime, end: datetime | None = None, **kw: Any
) -> Memory:
    return Memory(
        memory_id=memory_id("fact", user, s, p, o),
        tenant=TENANT,
        user_id=user,
        kind=MemoryKind.FACT,
        level=1,
        text=f"{s} {p} {o}",
        start=start,
        end=end,
        recorded_at=kw.pop("recorded_at", start),
        triple=Triple(subject=s, predicate=p, object=o),
        fact_type=FactType.ENTITY_RELATION,
        extractive=True,
        writer="test",
        **kw,
    )


def test_entity_filter_matches_substrings_time_and_validity() -> None:
    lisbon = fact("ann", "user", "lives in", "Lisbon", day(-400), day(-100), expired_at=day(-100))
    porto = fact("ann", "user", "lives in", "Porto", day(-100))
    dog = fact("ann", "Bella", "is", "the user's dog", day(0))
    facts = [lisbon, porto, dog]
    assert entity_filter(facts, predicate="LIVES") == [porto]  # case-insensitive; superseded left out
    assert entity_filter(facts, predicate="lives", include_superseded=True) == [lisbon, porto]
    assert entity_filter(facts, subject="bell", obj="dog") == [dog]
    assert entity_filter(facts) == [porto, dog]  # no part given: every current fact
    # Porto still holds, so it overlaps any later window; Lisbon ended before it.
    assert entity_filter(facts, predicate="lives", start=day(10), end=day(20), include_superseded=True) == [
        porto
    ]
    assert entity_filter(facts, op="before", start=day(-50), include_superseded=True) == [lisbon]
    not_a_fact = porto.model_copy(update={"kind": MemoryKind.EPISODE, "triple": None})
    assert entity_filter([not_a_fact]) == []


def item(n: int, start: float, recorded: float, kind: str = "fact", text: str = "", **kw: Any) -> rank.Item:
    return rank.Item(
        id=f"i{n:03d}",
        kind=kind,
        level=kw.pop("level", 1),
        text=text or f"item {n}",
        start=day(start),
        end=kw.pop("end", None),
        recorded_at=day(recorded),
        source_turn_ids=(),
        **kw,
    )


items_lists = st.lists(
    st.builds(item, st.integers(0, 999), st.integers(0, 5), st.integers(0, 5)), unique_by=lambda i: i.id
)


@given(items_lists, st.sampled_from(get_args(OrderBy)), st.integers(1, 7))
def test_pages_concatenate_to_the_whole_ordered_list(
    items: list[rank.Item], order_by: OrderBy, size: int
) -> None:
    whole = order_and_page(items, order_by, 0, len(items) + 1)
    assert sorted(i.id for i in whole) == sorted(i.id for i in items)  # count == the unpaged matches
    pages = [order_and_page(items, order_by, off, size) for off in range(0, len(items) + size, size)]
    assert [i for page in pages for i in page] == whole
    assert all(len(p) <= size for p in pages)
    key = [(i.start if "start" in order_by else i.recorded_at) for i in whole]
    assert key == sorted(key, reverse=order_by.startswith("-"))
    for a, b in itertools.pairwise(whole):  # ties by id, ascending in both directions
        if (a.start, a.recorded_at) == (b.start, b.recorded_at):
            assert a.id < b.id


def test_lexical_rank_puts_the_rare_word_first_and_drops_non_matches() -> None:
    items = [
        item(1, 0, 0, text="we talked about running and the weather"),
        item(2, 0, 0, text="running in Lisbon along the river"),
        item(3, 0, 0, text="a quiet day at home"),
        item(4, 0, 0, text="running again, running every day"),
    ]
    ranked = lexical_rank(items, "Lisbon running", limit=10)
    assert ranked[0][0].id == "i002"
    assert {i.id for i, _ in ranked} == {"i001", "i002", "i004"}
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
    assert len(lexical_rank(items, "running", limit=2)) == 2
    assert lexical_rank(items, "the of and", limit=5) == []  # stop words only: nothing matches


def test_contexts_gives_parent_children_and_same_kind_neighbours() -> None:
    units = [item(n, n, n, kind="unit") for n in range(5)]
    session = item(10, 1, 3, kind="session", level=2, children=("i001", "i002", "gone"), parent_id="i020")
    other = item(11, 4, 4, kind="session", level=2)
    day_node = item(20, 0, 5, kind="day", level=3, children=("i010",))
    adopted = item(30, 2, 2, kind="fact", parent_id="i010")
    nodes = [*units, session, other, day_node, adopted]

    ctx = contexts(session, nodes, 2)
    assert ctx.parent == day_node
    assert [c.id for c in ctx.children] == ["i001", "i002", "i030"]  # listed (missing ids skipped), adopted
    assert ctx.before == [] and ctx.after == [other]

    unit_ctx = contexts(units[2], nodes, 1)
    assert unit_ctx.parent == session  # a unit's parent is the node listing it
    assert unit_ctx.before == [units[1]] and unit_ctx.after == [units[3]]
    wide = contexts(units[2], nodes, 20)
    assert wide.before == units[:2] and wide.after == units[3:]
    assert contexts(units[2], nodes, 0).before == [] == contexts(units[2], nodes, 0).after


# --- tool schemas -------------------------------------------------------------------------------------------

SAMPLE_ARGS: dict[str, dict[str, Any]] = {
    "semantic_retrieve": {
        "query": "Bella the dog",
        "start": "2023-05-01T00:00:00Z",
        "kinds": ["unit", "fact"],
    },
    "lexical_retrieve": {
        "query": "Lisbon",
        "time_op": "within",
        "end": "2023-06-01T00:00:00+01:00",
        "limit": 3,
    },
    "find_memory_contexts": {"memory_id": "3f1a", "neighbours": 1},
    "find_entity_contexts": {"predicate": "lives in", "order_by": "-start", "aggregate": "count"},
}


def _walk(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        return [node, *(d for v in node.values() for d in _walk(v))]
    if isinstance(node, list):
        return [d for v in node for d in _walk(v)]
    return []


def test_openai_tools_are_valid_standalone_schemas_that_round_trip() -> None:
    tools = openai_tools()
    assert [t["function"]["name"] for t in tools] == list(TOOLS) == list(SAMPLE_ARGS) == list(RUNNERS)
    json.dumps(tools)
    for tool in tools:
        assert tool["type"] == "function"
        fn = tool["function"]
        assert len(fn["description"]) > 80 and "\n" not in fn["description"]
        params = fn["parameters"]
        assert params["type"] == "object" and params["properties"]
        assert set(params.get("required", [])) <= set(params["properties"])
        for prop in params["properties"].values():
            assert prop.get("description"), prop  # every argument is explained to the model
        for sub in _walk(params):
            assert "$ref" not in sub and "$defs" not in sub and "title" not in sub
        model = TOOLS[fn["name"]]
        sample = SAMPLE_ARGS[fn["name"]]
        assert set(sample) <= set(params["properties"])
        parsed = model.model_validate(sample)
        assert model.model_validate(parsed.model_dump(mode="json")) == parsed


def test_tool_kinds_are_units_and_every_memory_kind() -> None:
    assert set(get_args(ToolKind)) == {"unit"} | {k.value for k in MemoryKind}


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("semantic_retrieve", {"query": "x", "limit": 0}),
        ("semantic_retrieve", {"query": "x", "start": "2023-05-01T00:00:00"}),  # naive: rejected
        ("semantic_retrieve", {"query": "x", "start": "2023-05-02T00:00:00Z", "end": "2023-05-01T00:00:00Z"}),
        ("semantic_retrieve", {"query": "x", "kinds": ["memo"]}),
        ("lexical_retrieve", {"query": "x", "colour": "red"}),  # unknown fields are rejected
        ("find_memory_contexts", {"memory_id": "m", "neighbours": 21}),
        ("find_entity_contexts", {"offset": -1}),
        ("find_entity_contexts", {"subject": ""}),
    ],
)
def test_bad_arguments_raise_validation_errors(name: str, arguments: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(pydantic.ValidationError):
        run_tool(name, arguments, EdgeStore(tmp_path), HashingEmbedder(8), "acme/ann")


def test_an_unknown_tool_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown tool 'delete_everything'.*semantic_retrieve"):
        run_tool("delete_everything", {}, EdgeStore(tmp_path), HashingEmbedder(8), "acme/ann")


# --- the store shell on a hand-built store ------------------------------------------------------------------

USERS = ("ann", "bob")
EMBEDDER = HashingEmbedder(64)
UNIT_TEXTS = {
    "u1": (day(0.4), "user: I ran 10k along the river in Lisbon this morning"),
    "u2": (day(0.75), "user: my dog Bella loved the park today"),
    "u3": (day(1.4), "user: I started a pottery class"),
    "u4": (day(8.4), "user: the marathon training plan is hard"),
}


def mid(user: str, name: str) -> str:
    return memory_id("test", user, name)


def uid(user: str, name: str) -> str:
    return unit_id_for(TENANT, user, name)


def node(
    user: str, name: str, kind: MemoryKind, text: str, start: datetime, end: datetime, **kw: Any
) -> Memory:
    return Memory(
        memory_id=mid(user, name),
        tenant=TENANT,
        user_id=user,
        kind=kind,
        level=LEVEL[kind],
        text=text,
        start=start,
        end=end,
        recorded_at=end,
        extractive=True,
        writer="test",
        **kw,
    )


def user_memories(user: str) -> list[Memory]:
    """Every user gets the same texts and times: a leak across users could not hide behind a worse score."""
    units = [uid(user, n) for n in ("u1", "u2", "u3")]
    s1 = node(
        user,
        "s1",
        MemoryKind.SESSION,
        "Session: a run in Lisbon, Bella at the park",
        day(0.4),
        day(0.8),
        children=units[:2],
        parent_id=mid(user, "d1"),
    )
    s2 = node(
        user, "s2", MemoryKind.SESSION, "Session: pottery class", day(1.4), day(1.5), children=units[2:]
    )
    d1 = node(user, "d1", MemoryKind.DAY, "Day: running and the dog", day(0), day(1), children=[s1.memory_id])
    e1 = node(user, "e1", MemoryKind.EPISODE, "The user ran 10k in Lisbon", day(0.4), day(0.5))
    run = fact(user, "user", "ran", "10k in Lisbon", day(0.4), day(0.5), parent_id=e1.memory_id)
    dog = fact(user, "Bella", "is", "the user's dog", day(0.75), parent_id=e1.memory_id)
    porto = fact(user, "user", "lives in", "Porto", day(-100))
    lisbon = fact(
        user,
        "user",
        "lives in",
        "Lisbon",
        day(-400),
        day(-100),
        expired_at=day(-100),
        superseded_by=porto.memory_id,
    )
    return [s1, s2, d1, e1, run, dog, porto, lisbon]


def populate(store: VectorStore, user: str) -> set[str]:
    """Upsert the user's units and memories; returns their ids."""
    units = [
        Unit(
            unit_id=uid(user, name),
            tenant=TENANT,
            user_id=user,
            session_id="s1" if name in ("u1", "u2") else name,
            turn_id=name,
            ts=ts,
            timezone="UTC",
            text=text,
            speakers=["user"],
            content_hash=name,
        )
        for name, (ts, text) in UNIT_TEXTS.items()
    ]
    memories = user_memories(user)
    vectors = EMBEDDER.embed([u.text for u in units] + [m.text for m in memories])
    store.upsert(
        "units", [Point(u.unit_id, v, unit_payload(u)) for u, v in zip(units, vectors, strict=False)]
    )
    store.upsert(
        "memories",
        [
            Point(m.memory_id, v, memory_payload(m))
            for m, v in zip(memories, vectors[len(units) :], strict=True)
        ],
    )
    return {u.unit_id for u in units} | {m.memory_id for m in memories}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[VectorStore, dict[str, set[str]]]:
    store = EdgeStore(tmp_path_factory.mktemp("tools"))
    store.ensure_collection(units_spec(EMBEDDER.dim))
    store.ensure_collection(views_spec(EMBEDDER.dim))
    store.ensure_collection(memories_spec(EMBEDDER.dim))
    return store, {user: populate(store, user) for user in USERS}


def call(store: VectorStore, name: str, user: str = "ann", **arguments: Any) -> ToolResult:
    result = run_tool(name, arguments, store, EMBEDDER, f"{TENANT}/{user}")
    json.dumps(result.model_dump(mode="json"))  # every result is JSON-able
    return result


def test_semantic_retrieve_ranks_by_meaning_within_kinds_and_time(built: tuple[VectorStore, Any]) -> None:
    store, _ = built
    result = call(store, "semantic_retrieve", query="Bella the dog at the park", limit=3)
    assert len(result.items) == 3 and result.total is None
    assert "Bella" in result.items[0].text
    scores = [i.score or 0.0 for i in result.items]
    assert scores == sorted(scores, reverse=True)

    facts = call(store, "semantic_retrieve", query="where does the user live", kinds=["fact"], limit=10)
    assert {i.kind for i in facts.items} == {"fact"} and all(i.triple for i in facts.items)

    windowed = call(
        store, "semantic_retrieve", query="pottery marathon run", start=day(1), end=day(9), limit=20
    )
    assert windowed.items
    for i in windowed.items:
        assert in_time(i.start, i.end, day(1), day(9), "overlaps", open_end=i.kind == "fact")
    assert {"u1", "u2"}.isdisjoint(i.source_turn_ids[0] for i in windowed.items if i.kind == "unit")


def test_lexical_retrieve_finds_exact_words(built: tuple[VectorStore, Any]) -> None:
    store, _ = built
    result = call(store, "lexical_retrieve", query="pottery")
    assert {i.kind for i in result.items} == {"unit", "session"}
    assert all("pottery" in i.text.lower() for i in result.items)
    only_units = call(store, "lexical_retrieve", query="Lisbon", kinds=["unit"], end=day(1), time_op="within")
    assert [i.source_turn_ids for i in only_units.items] == [["u1"]]


def test_find_memory_contexts_walks_the_tree_and_time(built: tuple[VectorStore, Any]) -> None:
    store, _ = built
    s1 = call(store, "find_memory_contexts", memory_id=mid("ann", "s1"), neighbours=1)
    relations = [(i.relation, i.text if i.kind != "unit" else i.source_turn_ids[0]) for i in s1.items]
    assert relations == [
        ("node", "Session: a run in Lisbon, Bella at the park"),
        ("parent", "Day: running and the dog"),
        ("child", "u1"),
        ("child", "u2"),
        ("after", "Session: pottery class"),
    ]
    u3 = call(store, "find_memory_contexts", memory_id=uid("ann", "u3"), neighbours=5)
    assert [(i.relation, i.kind) for i in u3.items][:2] == [("node", "unit"), ("parent", "session")]
    assert [i.source_turn_ids[0] for i in u3.items if i.relation in ("before", "after")] == ["u1", "u2", "u4"]
    episode = call(store, "find_memory_contexts", memory_id=mid("ann", "e1"), neighbours=0)
    assert [i.triple.predicate for i in episode.items if i.relation == "child" and i.triple] == ["ran", "is"]
    assert call(store, "find_memory_contexts", memory_id="no-such-id").items == []


def test_find_entity_contexts_filters_orders_pages_and_counts(built: tuple[VectorStore, Any]) -> None:
    store, _ = built
    current = call(store, "find_entity_contexts", predicate="LIVES IN")
    assert [i.triple.object for i in current.items if i.triple] == ["Porto"] and current.total == 1
    history = call(
        store, "find_entity_contexts", predicate="lives", include_superseded=True, order_by="-start"
    )
    assert [(i.triple.object, i.current) for i in history.items if i.triple] == [
        ("Porto", True),
        ("Lisbon", False),
    ]
    counted = call(store, "find_entity_contexts", subject="user", aggregate="count", include_superseded=True)
    assert counted.items == [] and counted.count == 3
    pages = [
        call(store, "find_entity_contexts", include_superseded=True, limit=2, offset=o) for o in (0, 2, 4)
    ]
    assert [len(p.items) for p in pages] == [2, 2, 0] and {p.total for p in pages} == {4}
    starts = [i.start for p in pages for i in p.items]
    assert starts == sorted(starts)
    in_may = call(store, "find_entity_contexts", start=day(0), end=day(31), time_op="within")
    assert [i.triple.predicate for i in in_may.items if i.triple] == ["ran"]  # Bella still holds: not within


def test_json_text_arguments_as_an_llm_sends_them(built: tuple[VectorStore, Any]) -> None:
    store, _ = built
    result = run_tool("lexical_retrieve", '{"query": "marathon", "limit": 1}', store, EMBEDDER, "acme/ann")
    assert [i.source_turn_ids for i in result.items] == [["u4"]]


def test_every_tool_returns_only_the_asked_users_items(
    built: tuple[VectorStore, dict[str, set[str]]],
) -> None:
    store, owned = built
    for user in USERS:
        calls: dict[str, dict[str, Any]] = {
            "semantic_retrieve": {"query": "Lisbon run Bella dog pottery marathon Porto", "limit": 100},
            "lexical_retrieve": {"query": "Lisbon run Bella dog pottery marathon Porto", "limit": 100},
            "find_entity_contexts": {"include_superseded": True, "limit": 200},
            "find_memory_contexts": {"memory_id": mid(user, "s1"), "neighbours": 20},
        }
        for name, arguments in calls.items():
            result = call(store, name, user, **arguments)
            assert result.items, name
            assert {i.id for i in result.items} <= owned[user], (user, name)
        other = next(u for u in USERS if u != user)
        foreign = call(store, "find_memory_contexts", user, memory_id=mid(other, "s1"))
        assert foreign.items == []  # another user's id reads as unknown
    assert call(store, "lexical_retrieve", "carol", query="Lisbon").items == []


# --- the store shell on a store the pipeline built ----------------------------------------------------------


@pytest.fixture(scope="module")
def pipeline(sample_memory: VectorStore) -> tuple[VectorStore, HashingEmbedder]:
    return sample_memory, HashingEmbedder(384)


def test_tools_on_pipeline_memory_stay_within_the_user(pipeline: tuple[VectorStore, HashingEmbedder]) -> None:
    pipeline_store, embedder = pipeline
    keys = sorted({t.key for t in TURNS})
    assert len(keys) == 2
    for key in keys:
        turns = {t.turn_id for t in TURNS if t.key == key}
        topic = next(t.metadata.get("topic", "running") for t in TURNS if t.key == key)
        found = run_tool(
            "semantic_retrieve", {"query": str(topic), "limit": 50}, pipeline_store, embedder, key
        )
        found_lex = run_tool(
            "lexical_retrieve", {"query": str(topic), "limit": 50}, pipeline_store, embedder, key
        )
        facts = run_tool("find_entity_contexts", {"limit": 200}, pipeline_store, embedder, key)
        assert found.items and facts.items
        unit = next(i for i in found.items + found_lex.items if i.kind == "unit")
        ctx = run_tool("find_memory_contexts", {"memory_id": unit.id}, pipeline_store, embedder, key)
        assert [i.relation for i in ctx.items][:2] == ["node", "parent"]  # every unit sits under a session
        for result in (found, found_lex, facts, ctx):
            for i in result.items:
                # provenance: only this user's turns; what the text carries within what it covers
                assert set(i.source_turn_ids) <= set(i.covers_turn_ids) <= turns

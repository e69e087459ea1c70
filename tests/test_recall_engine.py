"""Recall over a real store built by the pipeline's own processor and consolidators (extractive)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.adapters.settings import Settings, StorageSettings
from memstream.adapters.store.shards import EdgeShards
from memstream.core.memories import KIND_FIELD, MEMORIES, memories_spec, memory_from_payload
from memstream.core.recall import rank
from memstream.core.recall.config import DEFAULT, FLAT_HYBRID, RecallConfig
from memstream.core.recall.engine import Ask, Recalled, brief, recall
from memstream.core.recall.time_intent import contains, distance
from memstream.core.store import Hit, SearchQuery, VectorStore
from memstream.core.unit_views import views_spec
from memstream.core.units import units_spec
from memstream.schemas.events import Message, Turn
from memstream.streams.ingest import Incoming, IngestProcessor
from tests.test_consolidation import TURNS


@pytest.fixture(scope="module")
def store(sample_memory: VectorStore) -> VectorStore:
    return sample_memory


USER = TURNS[0].key
NOW = max(t.ts for t in TURNS if t.key == USER)


def ask(store: VectorStore, query: str, budget: int = 500, levels: list[int] | None = None) -> Recalled:
    now = NOW if NOW.tzinfo else NOW.replace(tzinfo=UTC)
    return recall(
        store,
        HashingEmbedder(384),
        Ask(
            user_key=USER,
            query=query,
            now=now,
            budget_tokens=budget,
            levels=None if levels is None else tuple(levels),
        ),
    )


def test_recall_returns_the_users_memories_within_the_budget(store: VectorStore) -> None:
    topic = TURNS[0].metadata.get("topic", "running")
    result = ask(store, f"What did I say about {topic}?", budget=400)
    assert result.items
    assert rank.tokens(result.context) <= 400
    turn_ids = {t.turn_id for t in TURNS if t.key == USER}
    for item, _ in result.items:
        assert set(item.source_turn_ids) <= turn_ids  # never another user's memory
    assert {i.kind for i, _ in result.items} & {"unit", "episode", "fact"}
    days = {rank.day_header(i, ZoneInfo("UTC")) for i, _ in result.items}
    assert result.context.count("\n") + 1 == len(result.items) + len(days)  # a header line per day
    assert result.context.startswith("[") and "20" in result.context  # dated


def test_by_default_only_leaves_and_no_phatic_units_are_returned(store: VectorStore) -> None:
    result = ask(store, "Summarise how my last months went and why", budget=3000)
    assert result.items and {i.level for i, _ in result.items} == {rank.LEAF_LEVEL}
    assert not any(rank.phatic(i) for i, _ in result.items)


def test_tree_nodes_come_with_their_leaves_and_order_is_level_first(store: VectorStore) -> None:
    result = ask(store, "Summarise how my last months went and why", budget=3000, levels=[1, 2, 3, 4, 5])
    assert result.complexity == "complex"
    levels = [i.level for i, _ in result.items]
    assert levels == sorted(levels, reverse=True)
    assert any(level >= 2 for level in levels), "propagation must reach session or higher nodes"


def test_recall_items_credit_the_turns_their_text_carries_not_their_subtree(store: VectorStore) -> None:
    result = ask(store, "Summarise how my last months went and why", budget=3000, levels=[1, 2, 3, 4, 5])
    nodes = [i for i, _ in result.items if i.kind != "unit"]
    stored = {h.id: memory_from_payload(h.payload) for h in store.retrieve(MEMORIES, [i.id for i in nodes])}
    for item in nodes:
        assert item.source_turn_ids == tuple(stored[item.id].source_turn_ids)
        assert item.covers_turn_ids == tuple(stored[item.id].covers_turn_ids)
    above = [i for i in nodes if i.level >= 3]
    assert above and sum(len(i.source_turn_ids) for i in above) < sum(len(i.covers_turn_ids) for i in above)
    for unit in (i for i, _ in result.items if i.kind == "unit"):
        assert len(unit.source_turn_ids) == 1 and unit.covers_turn_ids == unit.source_turn_ids


def test_a_time_intent_puts_items_inside_the_interval_first(store: VectorStore) -> None:
    month = NOW.strftime("%B")
    result = ask(store, f"What happened in {month}?", budget=3000)
    assert result.intent.intervals and result.complexity == "hybrid"
    # Within each level, the closest to the asked month come first (0 = inside or touching it).
    for level in {i.level for i, _ in result.items}:
        gaps = [distance(result.intent, i.start, i.end) for i, _ in result.items if i.level == level]
        assert gaps == sorted(gaps), level
    assert any(contains(result.intent, i.start, i.end) for i, _ in result.items if i.level == 1)


def test_more_budget_never_returns_less(store: VectorStore) -> None:
    small = ask(store, "what do I like", budget=100)
    large = ask(store, "what do I like", budget=2000)
    assert len(large.items) >= len(small.items)
    assert rank.tokens(small.context) <= 100


def test_levels_restrict_what_is_returned_and_get_the_whole_budget(store: VectorStore) -> None:
    query = "Summarise how my last months went and why"
    everything = ask(store, query, budget=1500)
    leaves = recall(
        store,
        HashingEmbedder(384),
        Ask(user_key=USER, query=query, now=_now(), budget_tokens=1500, levels=(1,)),
    )
    nodes = recall(
        store,
        HashingEmbedder(384),
        Ask(user_key=USER, query=query, now=_now(), budget_tokens=1500, levels=(2, 3)),
    )
    assert leaves.items and {i.level for i, _ in leaves.items} == {1}
    assert len(leaves.items) >= sum(i.level == 1 for i, _ in everything.items)
    assert nodes.items and {i.level for i, _ in nodes.items} <= {2, 3}
    assert rank.tokens(nodes.context) <= 1500


def test_summaries_do_not_displace_the_best_leaves(store: VectorStore) -> None:
    """Summaries join the best leaves rather than replace them: no unit is gated out because a node above
    it was kept."""
    query = "What did I say about running?"
    leaves_only = recall(
        store,
        HashingEmbedder(384),
        Ask(user_key=USER, query=query, now=_now(), budget_tokens=600, levels=(1,)),
    )
    mixed = ask(store, query, budget=600)
    best = [i.id for i, _ in rank.top(leaves_only.items, 3)]
    assert set(best) <= {i.id for i, _ in mixed.items}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    query=st.text(min_size=1, max_size=60) | st.sampled_from(["What did I say about running?", "last week?"]),
    budget=st.integers(1, 3000),
    levels=st.none() | st.lists(st.integers(1, 5), min_size=1, max_size=5, unique=True),
    zone=st.sampled_from(["UTC", "Pacific/Kiritimati", "America/St_Johns"]),
    days=st.integers(-400, 400),
)
def test_the_context_never_exceeds_the_budget(
    store: VectorStore, query: str, budget: int, levels: list[int] | None, zone: str, days: int
) -> None:
    """The property through ``recall`` on a real store: the rendered context is at most ``budget_tokens``."""
    result = recall(
        store,
        HashingEmbedder(384),
        Ask(
            user_key=USER,
            query=query,
            now=_now() + timedelta(days=days),
            budget_tokens=budget,
            zone=zone,
            levels=None if levels is None else tuple(levels),
        ),
    )
    assert rank.tokens(result.context) <= budget
    if budget >= 100 and levels is None:
        assert result.items  # the store holds this user's memories: a useful budget returns some


class CountingStore:
    """A store that counts the calls recall makes (its round trips)."""

    def __init__(self, inner: VectorStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        self.calls[name] += 1
        return getattr(self.inner, name)


def test_recall_makes_a_bounded_number_of_store_calls(store: VectorStore) -> None:
    counting = CountingStore(store)
    result = recall(
        cast(VectorStore, counting),
        HashingEmbedder(384),
        Ask(
            user_key=USER,
            query="How has my running changed over the last months and why?",
            now=_now(),
            budget_tokens=2000,
        ),
    )
    assert result.items
    # units; their view points (by context and by sentences); episodes, facts and sessions: each one batch
    assert counting.calls["search_many"] == 3
    assert counting.calls["scroll"] <= DEFAULT.max_session_lookups
    assert counting.calls["retrieve"] <= 4  # one per tree level above the sessions
    assert set(counting.calls) <= {"search_many", "scroll", "retrieve"}


def test_recall_of_leaves_alone_looks_up_no_tree_node(store: VectorStore) -> None:
    """Leaves are the default levels: a session, day or week node could only stand for them, so recall
    neither searches session nodes nor walks up to any node's ancestors."""
    counting = CountingStore(store)
    searched: list[str] = []
    inner_search = store.search_many

    def search_many(collection: str, queries: Sequence[SearchQuery]) -> list[list[Hit]]:
        searched.extend(str(q.flt.equals.get(KIND_FIELD, collection)) for q in queries if q.flt)
        return inner_search(collection, queries)

    counting.inner = cast(VectorStore, SimpleNamespace(search_many=search_many))  # no scroll, no retrieve
    query = "How has my running changed over the last months and why?"
    result = recall(
        cast(VectorStore, counting), HashingEmbedder(384), Ask(user_key=USER, query=query, now=_now())
    )
    assert result.items and {i.level for i, _ in result.items} == {1}
    assert set(counting.calls) == {"search_many"}
    # the view points twice (by context, by sentences), in one batch; no "session"
    assert sorted(searched) == ["episode", "fact", "unit_views", "unit_views", "units"]


def _now() -> datetime:
    return NOW if NOW.tzinfo else NOW.replace(tzinfo=UTC)


DECOYS = [f"The festival trip plans are coming along, {w} festival trip plans." for w in ("a", "b", "c")]


def _store_of(tmp_path: Path, texts: list[str], speakers: Sequence[str] = ()) -> EdgeShards:
    """One user, one session, a turn a minute saying each of ``texts`` (by ``speakers``, else all by
    Anna); ingested, not consolidated."""
    turns = [
        Turn(
            tenant="t",
            user_id="anna",
            session_id="s1",
            turn_id=f"turn-{i}",
            ts=datetime(2024, 5, 1, 10, i, tzinfo=UTC),
            messages=[Message(speaker=speaker, content=text)],
        )
        for i, (text, speaker) in enumerate(zip(texts, speakers or ["Anna"] * len(texts), strict=True))
    ]
    shards = EdgeShards(tmp_path / "store", [units_spec(384), views_spec(384), memories_spec(384)])
    processor = IngestProcessor(
        Settings(storage=StorageSettings(data_dir=tmp_path)), HashingEmbedder(384), shards
    )
    records = [Incoming(t.to_bytes(), t.key, "turns", 0, n) for n, t in enumerate(turns)]
    asyncio.run(processor.process(records, {}))
    return shards


def _lexical_store(tmp_path: Path) -> EdgeShards:
    """One user: a dozen turns that share most of the question's words, and one that says only its
    rarest word, so the dense list misses it when it is short."""
    return _store_of(tmp_path, [*(DECOYS * 4), "My cousin finally booked Zanzibar for the spring."])


@pytest.mark.parametrize(("lexical", "found"), [(DEFAULT.lexical_candidates, True), (0, False)])
def test_a_unit_saying_the_questions_words_is_a_candidate_beyond_the_dense_list(
    tmp_path: Path, lexical: int, found: bool
) -> None:
    shards = _lexical_store(tmp_path)
    # a dense list that covers a few of the user's units
    config = replace(DEFAULT, unit_candidates=5, lexical_candidates=lexical)
    result = recall(
        shards.get(0),
        HashingEmbedder(384),
        Ask(
            user_key="t/anna",
            query="Are the festival trip plans for Zanzibar coming along?",
            now=datetime(2024, 5, 2, tzinfo=UTC),
            budget_tokens=2000,
        ),
        config,
    )
    shards.close()
    assert any("Zanzibar" in i.text for i, _ in result.items) is found  # every candidate fits the budget
    zanzibar = [i for i, _ in result.items if "Zanzibar" in i.text]
    assert all(0 < i.dense < max(j.dense for j, _ in result.items) for i in zanzibar)  # it kept its cosine


def test_recall_runs_on_the_config_it_is_given(tmp_path: Path) -> None:
    shards = _store_of(
        tmp_path,
        ["I booked the Zanzibar trip for the spring.", "Thanks, Ben!", "The flights to Zanzibar were cheap."],
    )

    def ask_with(config: RecallConfig) -> Recalled:
        now = datetime(2024, 5, 2, tzinfo=UTC)
        return recall(
            shards.get(0),
            HashingEmbedder(384),
            Ask(user_key="t/anna", query="Zanzibar trip", now=now),
            config,
        )

    default, flat = ask_with(DEFAULT), ask_with(replace(FLAT_HYBRID, lam=1.0))
    shards.close()
    assert not any("Thanks" in i.text for i, _ in default.items)  # phatic: dropped by default
    assert any("Thanks" in i.text for i, _ in flat.items)  # the flat preset filters nothing
    assert all(score == pytest.approx(i.dense) for i, score in flat.items)  # cosine only, no smoothing
    assert any(score != pytest.approx(i.dense) for i, score in default.items)


def test_a_question_naming_a_speaker_weighs_their_turns_and_turns_that_only_ask_weigh_less(
    tmp_path: Path,
) -> None:
    texts = [
        "I booked a trip to Zanzibar.",
        "I booked a trip to Lisbon.",
        "Which airline did you book for Lisbon?",
    ]
    shards = _store_of(tmp_path, texts, ["Anna", "Ben", "Anna"])

    def scores(config: RecallConfig) -> dict[str, float]:
        now = datetime(2024, 5, 2, tzinfo=UTC)
        found = recall(
            shards.get(0),
            HashingEmbedder(384),
            Ask(user_key="t/anna", query="Where did Ben book a trip?", now=now),
            config,
        )
        return {i.text: s for i, s in found.items}

    off = scores(replace(DEFAULT, speaker_weight=0.0, question_weight=0.0))
    on = scores(replace(DEFAULT, speaker_weight=0.5, question_weight=0.5))
    shards.close()
    assert len(off) == 3
    assert on["Ben: I booked a trip to Lisbon."] == pytest.approx(
        1.5 * off["Ben: I booked a trip to Lisbon."]
    )
    assert on["Anna: I booked a trip to Zanzibar."] == pytest.approx(
        off["Anna: I booked a trip to Zanzibar."]
    )
    asks = "Anna: Which airline did you book for Lisbon?"
    assert on[asks] == pytest.approx(0.5 * off[asks])


class RecordingEmbedder(HashingEmbedder):
    """Remembers the texts it embeds."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        return super().embed(texts)


@pytest.mark.parametrize(
    ("query", "weight", "embedded", "searches"),
    [
        (
            "Where did Anna book the Zanzibar trip?",
            DEFAULT.speakerless_weight,
            ["Where did book the Zanzibar trip?"],
            4,
        ),
        ("Where did Anna book the Zanzibar trip?", 0.0, [], 3),  # off
        ("Where did I book the Zanzibar trip?", DEFAULT.speakerless_weight, [], 3),  # no speaker named
        ("Anna?", DEFAULT.speakerless_weight, [], 3),  # nothing but the name
    ],
)
def test_a_query_naming_a_speaker_is_searched_once_more_without_the_name(
    tmp_path: Path, query: str, weight: float, embedded: list[str], searches: int
) -> None:
    shards = _store_of(tmp_path, ["I booked the Zanzibar trip for the spring.", "The flights were cheap."])
    counting, embedder = CountingStore(shards.get(0)), RecordingEmbedder(384)
    result = recall(
        cast(VectorStore, counting),
        embedder,
        Ask(
            user_key="t/anna",
            query=query,
            now=datetime(2024, 5, 2, tzinfo=UTC),
            vector=HashingEmbedder(384).embed([query])[0],
        ),
        replace(DEFAULT, speakerless_weight=weight),
    )
    shards.close()
    assert embedder.texts == embedded
    assert counting.calls["search_many"] == searches
    assert any("Zanzibar" in i.text for i, _ in result.items)


def test_recall_returns_and_renders_a_unit_without_its_small_talk_and_flat_as_said(tmp_path: Path) -> None:
    said = "Hi Ben! Thanks so much! I booked the Zanzibar trip for the spring."
    shards = _store_of(tmp_path, [said, "The flights to Zanzibar were cheap."])

    def ask_with(config: RecallConfig) -> Recalled:
        now = datetime(2024, 5, 2, tzinfo=UTC)
        return recall(
            shards.get(0),
            HashingEmbedder(384),
            Ask(user_key="t/anna", query="Zanzibar trip", now=now),
            config,
        )

    default, flat = ask_with(DEFAULT), ask_with(replace(DEFAULT, condense=False))
    shards.close()
    booked = "Anna: I booked the Zanzibar trip for the spring."
    assert booked in [i.text for i, _ in default.items]
    assert booked in default.context.splitlines() and "Thanks" not in default.context
    assert f"Anna: {said}" in [i.text for i, _ in flat.items]
    assert not FLAT_HYBRID.condense  # the flat baseline's preset returns turns as said


@pytest.mark.parametrize(
    ("text", "slot", "expected"),
    [
        (
            "Ann: Wow, thanks! I adopted a cat named Miso. She sleeps all day.",
            2,
            "Ann: I adopted a cat named Miso.",
        ),
        ("Ann: Wow, thanks! I adopted a cat named Miso. She sleeps all day.", 3, "Ann: She sleeps all day."),
        ("Ann: Wow, thanks! I adopted a cat named Miso.", 1, ""),  # small talk says nothing
        ("Ann: I adopted a cat named Miso.", 1, ""),  # one sentence: the unit itself
        ("Ann: I adopted a cat. She sleeps.", 3, ""),  # not one of its sentences
        ("Ann: I adopted a cat. She sleeps.", 0, ""),  # the context view
        ("Ann: Look! [shares a photo: a grey cat on a sofa]", 2, "Ann: shares a photo: a grey cat on a sofa"),
    ],
)
def test_a_units_brief_is_its_sentence_at_the_view_slot(text: str, slot: int, expected: str) -> None:
    assert brief(text, slot) == expected

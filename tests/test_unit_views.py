"""A unit's sentence and context views: the pure functions, what ingest stores (whatever the batching),
and how recall mixes them into a unit's dense score."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest

from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.adapters.settings import EmbeddingSettings, Settings, StorageSettings
from memstream.adapters.store import scroll_all
from memstream.adapters.store.shards import EdgeShards
from memstream.apps.sample_conversations import generate
from memstream.core.embedder import Vectors
from memstream.core.forgetting import erase_user
from memstream.core.memories import memories_spec
from memstream.core.recall.config import DEFAULT, RecallConfig
from memstream.core.recall.engine import Ask, recall
from memstream.core.store import Filter, VectorStore
from memstream.core.unit_views import UNIT_VIEWS, context_vector, sentence_texts, views_spec
from memstream.core.units import UNITS, USER_FIELD, units_spec
from memstream.schemas.events import Turn
from memstream.streams.ingest import Incoming, IngestProcessor
from tests.test_recall_engine import _store_of

EMBEDDER = HashingEmbedder(384)
Vector = npt.NDArray[np.float32]
SENTENCE, CONTEXT = "sentence", "context"


def test_sentence_texts_label_each_sentence_and_keep_a_one_sentence_unit_whole() -> None:
    text = "Ana: I moved to Porto in May. The flat is small! [shares a photo: a tiled kitchen]\nBo: Nice."
    assert sentence_texts(text) == [
        "Ana: I moved to Porto in May.",
        "Ana: The flat is small!",
        "Ana: shares a photo: a tiled kitchen",
        "Bo: Nice.",
    ]
    assert sentence_texts("Ana: I moved to Porto in May.") == ["Ana: I moved to Porto in May."]
    assert sentence_texts("no speaker here. Two sentences.") == ["no speaker here.", "Two sentences."]


def test_a_context_view_is_the_normalised_sum_or_the_units_own_vector() -> None:
    own, before = EMBEDDER.embed(["Ana: yes, since 2016", "Bo: how long have you played guitar?"])
    assert context_vector(own, None) is own
    mixed = context_vector(own, before)
    assert float(np.linalg.norm(mixed)) == pytest.approx(1.0, abs=1e-5)
    assert mixed == pytest.approx((own + before) / np.linalg.norm(own + before), abs=1e-6)


def _ingest(tmp: Path, turns: list[Turn], batch: int) -> EdgeShards:
    shards = EdgeShards(tmp / "store", [units_spec(384), views_spec(384), memories_spec(384)])
    processor = IngestProcessor(Settings(storage=StorageSettings(data_dir=tmp)), EMBEDDER, shards)
    records = [Incoming(t.to_bytes(), t.key, "turns", 0, n) for n, t in enumerate(turns)]
    state: dict[bytes, Any] = {}

    async def feed() -> None:
        for i in range(0, len(records), batch):
            state.update((await processor.process(records[i : i + batch], state)).window_state)

    asyncio.run(feed())
    return shards


def _views(store: VectorStore) -> dict[tuple[str, str], list[Vector]]:
    """(unit id, SENTENCE or CONTEXT) -> that unit's sentence rows, or its context vector: one view point a
    unit, with the unit's id and only its user and tenant in its payload."""
    hits = scroll_all(store, UNIT_VIEWS)
    out: dict[tuple[str, str], list[Vector]] = {}
    for h in store.retrieve(UNIT_VIEWS, [h.id for h in hits], with_vectors=True):
        assert h.vector is not None and h.multi is not None
        assert h.payload.keys() == {USER_FIELD, "tenant"}
        out[(h.id, CONTEXT)] = [h.vector]
        out[(h.id, SENTENCE)] = list(h.multi)
    assert len(out) == 2 * len(hits)
    return out


def test_ingest_stores_the_same_views_whatever_the_batching(tmp_path: Path) -> None:
    """One batch or a turn per batch (the predecessor then comes from the store, named by the window
    state): every unit has its sentence views and one context view, the same vectors either way."""
    turns = list(generate(users=2, days=10, seed=3))
    whole = _ingest(tmp_path / "whole", turns, len(turns))
    single = _ingest(tmp_path / "single", turns, 1)
    views, views_single = _views(whole.get(0)), _views(single.get(0))
    units = {h.id: h.payload for h in scroll_all(whole.get(0), UNITS)}
    assert {unit for unit, _ in views} == set(units)
    assert any(len(v) > 1 for (_, view), v in views.items() if view == SENTENCE)  # sentences were cut
    assert views.keys() == views_single.keys()
    for key, vectors in views.items():
        assert len(vectors) == len(views_single[key])
        for a, b in zip(vectors, views_single[key], strict=True):
            assert a == pytest.approx(b, abs=1e-5)

    # Each unit's sentence views embed its sentences; its context view adds the unit before it in its
    # session (by dialogue time), or is its own vector when it opens the session.
    by_session: dict[str, list[Turn]] = {}
    for t in sorted(turns, key=lambda t: t.ts):
        by_session.setdefault(f"{t.key}/{t.session_id}", []).append(t)
    opened = joined = 0
    for session in by_session.values():
        texts = ["\n".join(f"{m.speaker}: {m.content}" for m in t.messages) for t in session]
        embedded = EMBEDDER.embed(texts)
        for i, (turn, text) in enumerate(zip(session, texts, strict=True)):
            unit_id = next(u for u, p in units.items() if turn_of(p) == (turn.key, turn.turn_id))
            sentences = sentence_texts(text)
            assert len(views[(unit_id, SENTENCE)]) == len(sentences)
            best = max(float(v @ embedded[i]) for v in views[(unit_id, SENTENCE)])
            assert best == pytest.approx(
                max(float(v @ embedded[i]) for v in EMBEDDER.embed(sentences)), abs=1e-5
            )
            expected = context_vector(embedded[i], embedded[i - 1] if i else None)
            (context,) = views[(unit_id, CONTEXT)]
            assert context == pytest.approx(expected / np.linalg.norm(expected), abs=1e-5)
            opened += i == 0
            joined += i > 0
    assert opened and joined

    user = turns[0].key
    counts = erase_user(whole.get(0), user, [UNITS, UNIT_VIEWS])
    assert counts[1] == counts[0] > 0  # views carry the user key: forgetting a user takes them too
    assert whole.get(0).count(UNIT_VIEWS, Filter(equals={USER_FIELD: user})) == 0
    whole.close()
    single.close()


def turn_of(payload: dict[str, Any]) -> tuple[str, str]:
    """A stored unit's (user key, turn id)."""
    unit = orjson.loads(payload["unit"])
    return f"{unit['tenant']}/{unit['user_id']}", unit["turn_id"]


TEXTS = [
    "We went hiking near the lake on Saturday.",
    "The weather stayed fine all week long.",
    "I paint landscapes on Sundays. Hiking at dawn in the mountains is my other love.",
]
QUERY = "hiking at dawn in the mountains"


def _dense(store: VectorStore, config: RecallConfig) -> dict[str, float]:
    result = recall(
        store,
        EMBEDDER,
        Ask(user_key="t/anna", query=QUERY, now=datetime(2024, 5, 2, tzinfo=UTC)),
        replace(config, neighbour_weight=0.0),
    )
    return {i.source_turn_ids[0]: i.dense for i, _ in result.items if i.kind == "unit"}


def test_recall_mixes_a_units_turn_sentence_and_context_cosines(tmp_path: Path) -> None:
    shards = _store_of(tmp_path, TEXTS)
    store = shards.get(0)
    q = EMBEDDER.embed([QUERY])[0]
    turns = EMBEDDER.embed([f"Anna: {t}" for t in TEXTS])
    expected = {}
    for i, text in enumerate(TEXTS):
        sentence = max(float(v @ q) for v in EMBEDDER.embed(sentence_texts(f"Anna: {text}")))
        context = context_vector(turns[i], turns[i - 1] if i else None)
        cosines = (float(turns[i] @ q), sentence, float(context @ q))
        expected[f"turn-{i}"] = sum(cosines) / 3

    assert _dense(store, DEFAULT) == pytest.approx(expected, abs=1e-5)
    whole_turn = replace(DEFAULT, turn_weight=1.0, sentence_weight=0.0, context_weight=0.0)
    assert _dense(store, whole_turn) == pytest.approx(
        {f"turn-{i}": float(turns[i] @ q) for i in range(3)}, abs=1e-5
    )

    # Units beyond the hits asked for score the last hit's cosine, an upper bound of their own: with one
    # unit fetched by context and one by sentences, every other unit scores as the best of each.
    views = EMBEDDER.embed([s for t in TEXTS for s in sentence_texts(f"Anna: {t}")])
    contexts = [context_vector(turns[i], turns[i - 1] if i else None) for i in range(3)]
    top = max(float(np.max(views @ q)), max(float(c @ q) for c in contexts))
    one = _dense(store, replace(DEFAULT, view_candidates=1))
    for i in range(3):
        turn = f"turn-{i}"
        assert expected[turn] - 1e-5 <= one[turn] <= (float(turns[i] @ q) + 2 * top) / 3 + 1e-5
    assert any(one[t] > expected[t] + 1e-4 for t in one)
    shards.close()


def test_a_unit_of_several_sentences_carries_its_sentence_nearest_the_query_as_its_brief(
    tmp_path: Path,
) -> None:
    """The brief is the unit's sentence nearest the query (from its stored sentence rows); one-sentence
    units have none, and neither does any unit when ``briefs`` is off."""
    shards = _store_of(tmp_path, TEXTS)
    store = shards.get(0)
    q = EMBEDDER.embed([QUERY])[0]
    said = sentence_texts(f"Anna: {TEXTS[2]}")
    nearest = max(said, key=lambda s: float(EMBEDDER.embed([s])[0] @ q))
    assert nearest == "Anna: Hiking at dawn in the mountains is my other love."

    def briefs(config: RecallConfig) -> dict[str, str]:
        result = recall(
            store, EMBEDDER, Ask(user_key="t/anna", query=QUERY, now=datetime(2024, 5, 2, tzinfo=UTC)), config
        )
        return {i.source_turn_ids[0]: i.brief for i, _ in result.items}

    assert briefs(replace(DEFAULT, briefs=True)) == {"turn-0": "", "turn-1": "", "turn-2": nearest}
    assert set(briefs(DEFAULT).values()) == {""}  # off by default (memstream/core/recall/config.py)
    shards.close()


def test_units_stored_without_views_keep_their_whole_turn_cosine(tmp_path: Path) -> None:
    """A store written before views existed: fewer view hits than asked, so a unit without views is
    scored by its whole-turn cosine alone."""
    shards = _store_of(tmp_path, TEXTS)
    store = shards.get(0)
    store.delete(UNIT_VIEWS, Filter())
    q = EMBEDDER.embed([QUERY])[0]
    turns = EMBEDDER.embed([f"Anna: {t}" for t in TEXTS])
    assert _dense(store, DEFAULT) == pytest.approx(
        {f"turn-{i}": float(turns[i] @ q) for i in range(3)}, abs=1e-5
    )
    shards.close()


class CountingEmbedder(HashingEmbedder):
    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.texts += len(texts)
        return super().embed(texts)


def test_without_sentence_views_ingest_embeds_the_turns_only(tmp_path: Path) -> None:
    """MEMSTREAM_SENTENCE_VIEWS=false: a unit's one sentence view is its whole-turn vector."""
    turns = list(generate(users=1, days=5, seed=4))
    embedder = CountingEmbedder(384)
    shards = EdgeShards(tmp_path / "store", [units_spec(384), views_spec(384)])
    processor = IngestProcessor(
        Settings(
            storage=StorageSettings(data_dir=tmp_path), embedding=EmbeddingSettings(sentence_views=False)
        ),
        embedder,
        shards,
    )
    records = [Incoming(t.to_bytes(), t.key, "turns", 0, n) for n, t in enumerate(turns)]
    asyncio.run(processor.process(records, {}))
    assert embedder.texts == len(turns)
    assert any(len(sentence_texts(u.payload["text"])) > 1 for u in scroll_all(shards.get(0), UNITS))
    units = {
        h.id: h for h in shards.get(0).retrieve(UNITS, [h.id for h in scroll_all(shards.get(0), UNITS)], True)
    }
    views = _views(shards.get(0))
    for unit_id, unit in units.items():
        (sentence,) = views[(unit_id, SENTENCE)]
        assert sentence == pytest.approx(unit.vector, abs=1e-5)
    shards.close()

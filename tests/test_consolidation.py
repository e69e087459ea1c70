"""Consolidation without Kafka: the ingest processor's requests and closed windows, fed to the
recurrence consolidator and the tree summarizer, their updates applied by the indexer, on a real
Qdrant Edge store. Once with the extractive writer, once with the LLM writer over real HTTP
against the OpenAI-compatible test server."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast
from zoneinfo import ZoneInfo

import pytest

from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.adapters.settings import (
    ConsolidationSettings,
    EmbeddingSettings,
    LlmSettings,
    Settings,
    StorageSettings,
)
from memstream.adapters.store.shards import EdgeShards
from memstream.apps.sample_conversations import generate
from memstream.consumers import Consolidation, build_consolidation
from memstream.consumers.extractive import sentences
from memstream.consumers.indexer import Indexer
from memstream.consumers.writer import Source
from memstream.core.dates import MONTH_NAMES
from memstream.core.memories import MEMORIES, memories_spec, memory_from_payload
from memstream.core.store import Hit, VectorStore, scroll_all
from memstream.core.tree import covers
from memstream.core.unit_views import views_spec
from memstream.core.units import UNITS, unit_from_payload, units_spec
from memstream.schemas.events import ConsolidationRequest, Message, Turn, WindowClosed
from memstream.schemas.memory import Memory, MemoryKind, MemoryOp, MemoryUpdate
from memstream.schemas.topics import CONSOLIDATION, WINDOWS
from memstream.streams.offline import InProcess
from memstream.testing.chat_responder import respond
from memstream.testing.openai_server import OpenAIServer
from tests.conftest import small_talk_requests

TURNS = list(generate(users=2, days=40, seed=3))
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def ingest(
    settings: Settings,
    shards: EdgeShards,
    consolidation: Consolidation | None = None,
    turns: Sequence[Turn] = TURNS,
) -> InProcess:
    """The pipeline in process (streams/offline.py) with ``turns`` ingested, not yet consolidated."""
    pipeline = InProcess(
        settings, HashingEmbedder(settings.embedding.hash_dim), shards, consolidation, batch_size=64
    )
    asyncio.run(pipeline.ingest(turns))
    return pipeline


def consolidate(pipeline: InProcess) -> None:
    """What the worker's agents do next (InProcess.settle)."""
    asyncio.run(pipeline.settle())


def consolidate_only(pipeline: InProcess, request_ids: Collection[str]) -> None:
    """Consolidate these of the published requests, and nothing else."""
    pipeline.topics.keep_unread(
        CONSOLIDATION, lambda r: ConsolidationRequest.from_bytes(r.value or b"").request_id in request_ids
    )
    pipeline.topics.keep_unread(WINDOWS, lambda _: False)
    asyncio.run(pipeline.drain())


def requests(pipeline: InProcess) -> list[ConsolidationRequest]:
    return pipeline.topics.published(CONSOLIDATION, ConsolidationRequest)


def redeliver(pipeline: InProcess, settings: Settings, shards: EdgeShards, c: Consolidation) -> None:
    """Every consolidation request and closed window again, to a worker that lost its state."""
    again = InProcess(settings, HashingEmbedder(settings.embedding.hash_dim), shards, c, batch_size=64)
    for spec in (CONSOLIDATION, WINDOWS):
        for r in pipeline.topics.logs[spec.name]:
            again.topics.append(spec.name, r.key_bytes or b"", r.value or b"", r.timestamp)
    asyncio.run(again.drain())


def memories(store: VectorStore) -> dict[str, Memory]:
    return {h.id: memory_from_payload(h.payload) for h in scroll_all(store, MEMORIES)}


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as s:
        s.chat_responder = respond
        yield s


# the LLM writer's replays go through the OpenAI-compatible test server over HTTP: 9-16 s each, so
# `make test` runs them and `make test-fast` does not
@pytest.fixture(params=["extractive", pytest.param("llm", marks=pytest.mark.slow)])
def setup(
    request: pytest.FixtureRequest, tmp_path: Path, server: OpenAIServer
) -> tuple[Settings, Consolidation, EdgeShards]:
    overrides: dict[str, Any] = {"data_dir": tmp_path, "embedder": "hash", "llm_backoff_base_s": 0.01}
    if request.param == "llm":
        overrides |= {"llm_base_url": server.base_url, "llm_model": "test-model"}
    settings = Settings().replace(**overrides)
    embedder = HashingEmbedder(settings.embedding.hash_dim)
    shards = EdgeShards(
        tmp_path / "store", [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)]
    )
    return settings, build_consolidation(settings, embedder, embedder.default_theta_sim), shards


def test_a_replay_builds_episodes_facts_and_every_tree_level(
    setup: tuple[Settings, Consolidation, EdgeShards],
) -> None:
    settings, consolidation, shards = setup
    pipeline = ingest(settings, shards, consolidation)
    assert requests(pipeline)
    assert pipeline.topics.published(WINDOWS, WindowClosed)
    store = shards.get(0)
    consolidate(pipeline)
    mem = memories(store)
    kinds = {m.kind for m in mem.values()}
    assert {MemoryKind.EPISODE, MemoryKind.FACT, MemoryKind.SESSION, MemoryKind.DAY, MemoryKind.WEEK} <= kinds
    assert {MemoryKind.PROFILE, MemoryKind.TOPIC, MemoryKind.PERSONA} <= kinds  # 40 days: a month closed
    assert MemoryKind.OBSERVATION in kinds
    for m in mem.values():
        # observations are extractive whichever writer writes the rest (consumers/tree.py)
        assert m.extractive == (consolidation.llm is None or m.kind == MemoryKind.OBSERVATION)
        if m.kind in (MemoryKind.EPISODE, MemoryKind.FACT, MemoryKind.SESSION):
            assert m.source_turn_ids, m
        for child_id in m.children:
            child = mem.get(child_id)
            if child is not None and m.kind not in (MemoryKind.TOPIC, MemoryKind.PERSONA):
                assert covers(m, child), (m.kind, child.kind)
                assert child.parent_id == m.memory_id
    # Every recurrence request is folded into one or more episodes, but one of small talk only
    # (recurring "Coffee time here."): it makes nothing, and the writer is not called.
    folded = {r for m in mem.values() if m.kind == MemoryKind.EPISODE for r in m.request_ids}
    asked = {r.request_id for r in requests(pipeline)}
    small_talk = small_talk_in(store, requests(pipeline))
    assert small_talk and folded == asked - small_talk
    shards.close()


def small_talk_in(store: VectorStore, requests: Sequence[ConsolidationRequest]) -> set[str]:
    return small_talk_requests(requests, (unit_from_payload(h.payload) for h in scroll_all(store, UNITS)))


def test_small_talk_only_makes_nothing_and_costs_no_llm_call(tmp_path: Path, server: OpenAIServer) -> None:
    """A recurring cluster of pleasantries ("Coffee time here." / "Enjoy it!") is not memory: the
    recurrence consolidator returns nothing without calling the writer, so no tokens are spent."""
    settings = Settings(
        storage=StorageSettings(data_dir=tmp_path),
        embedding=EmbeddingSettings(embedder="hash"),
        llm=LlmSettings(llm_base_url=server.base_url, llm_model="m"),
    )
    embedder = HashingEmbedder(settings.embedding.hash_dim)
    shards = EdgeShards(
        tmp_path / "store", [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)]
    )
    consolidation = build_consolidation(settings, embedder, embedder.default_theta_sim)
    pipeline = ingest(settings, shards, consolidation)
    store = shards.get(0)
    small_talk = small_talk_in(store, requests(pipeline))
    assert small_talk, "the sample has recurring small talk"
    calls = server.usage_totals["calls"]
    consolidate_only(pipeline, small_talk)
    assert server.usage_totals["calls"] == calls
    assert memories(store) == {}
    shards.close()


TREE = (MemoryKind.DAY, MemoryKind.WEEK, MemoryKind.PROFILE)


def test_provenance_names_the_turns_a_memory_states_and_covers_its_subtree(
    setup: tuple[Settings, Consolidation, EdgeShards],
) -> None:
    settings, consolidation, shards = setup
    store = shards.get(0)
    consolidate(ingest(settings, shards, consolidation))
    mem = memories(store)
    units = [unit_from_payload(h.payload) for h in scroll_all(store, UNITS)]
    said = {(u.key, u.turn_id): u.text for u in units}
    names = sorted({s for u in units for s in u.speakers})  # an observation names who "you" was
    for m in mem.values():
        assert set(m.source_turn_ids) <= set(m.covers_turn_ids)
        assert {(m.key, t) for t in m.covers_turn_ids} <= said.keys()
        children = [mem[c] for c in m.children if c in mem]
        if m.kind == MemoryKind.SESSION:
            assert set(m.covers_turn_ids) == {u.turn_id for u in units if u.unit_id in m.children}
        elif m.kind in TREE and len(children) == len(m.children):
            assert {t for c in children for t in c.covers_turn_ids} <= set(m.covers_turn_ids)
            if len(children) == 1 and m.kind != MemoryKind.PROFILE:  # a passthrough: the child's text
                assert m.source_turn_ids == children[0].source_turn_ids
        if consolidation.llm is None or m.kind == MemoryKind.OBSERVATION:
            # extractive: every sentence is said in one of its source turns
            sources = [said[m.key, t] for t in m.source_turn_ids]
            if m.kind == MemoryKind.OBSERVATION:
                assert len(m.source_turn_ids) >= 1 and m.source_unit_ids and m.start == m.end
            if m.kind in THIRD_PERSON:
                # the names "I", "my", "you", "we" became; "we're" -> "... and others are"
                sources += [*names, *(f"{n}'s" for n in names), "and others are have will would going to"]
            for body in read_back(m.text):
                body = re.sub(r"^On \d{1,2} \w+ \d{4}, ", "", body)  # a week's line names its day
                if m.kind in STATING:  # restated in the third person: its words are the turns'
                    assert restates(body, sources), (m.kind, body)
                else:
                    assert any(body in text for text in sources), (m.kind, body)
            assert len(m.sentence_turn_ids) in (0, len(read_back(m.text)))
    # Nodes tell some sentences of a subtree: they name fewer turns than they cover (a short session of
    # these chats is told almost whole: up to digests.SPEAKER_WORDS content words a speaker).
    nodes = [m for m in mem.values() if m.kind in TREE]
    assert sum(len(m.source_turn_ids) for m in nodes) < sum(len(m.covers_turn_ids) for m in nodes) * 0.6
    assert all(m.source_turn_ids for m in mem.values() if m.kind in (MemoryKind.EPISODE, MemoryKind.FACT))
    shards.close()


# Told in the third person: observations, and session, day and week nodes (consumers/extractive/digests.py).
THIRD_PERSON = (MemoryKind.OBSERVATION, MemoryKind.SESSION, MemoryKind.DAY, MemoryKind.WEEK)
STATING = (MemoryKind.FACT, MemoryKind.PROFILE, MemoryKind.TOPIC, MemoryKind.PERSONA, *THIRD_PERSON)
# What a statement adds to the words it restates: "my" as "their", a plan's or a relation's verb.
RESTATED = {"their", "theirs", "they", "them", "themselves", "is", "has", "plans", "hopes", "wants", "needs"}
# ... and what a node writes out: contractions ("they're" -> "they are"), a relative time as its date
# ("two weeks from now" -> "in the week of 3 February": digests.in_words).
RESTATED |= {"are", "have", "will", "would", "had", "not", "cannot", "because", "am", "on", "in", "of", "the"}
RESTATED |= {"week", "weekend", *(m.lower() for m in MONTH_NAMES)}
MONTHS = "|".join(m.lower() for m in MONTH_NAMES)
DATE = re.compile(rf"\b(?:\d{{1,2}}(?:[–-]\d{{1,2}})? )?(?:{MONTHS})(?: \d{{4}})?\b|\b(?:19|20)\d\d\b")


def restates(body: str, sources: list[str]) -> bool:
    """Every word of a statement is a word of its sources, a third-person form of one, or RESTATED."""
    said = {w for text in sources for w in re.findall(r"[\w'’-]+", text.lower())}
    said |= {f"{w}s" for w in said} | {f"{w}es" for w in said} | {f"{w[:-1]}ies" for w in said} | RESTATED
    # a date the node wrote ("on 7 May 2023", "the weekend of 1–2 May", "in 2025"): its numbers come
    # from the dialogue time; every other number must have been said
    undated = DATE.sub(" ", body.lower().replace("→", " "))
    return set(re.findall(r"[\w'’-]+", undated)) <= said


def read_back(text: str) -> list[str]:
    """A memory's sentences as a parent reads them, without dates, speakers, headers, annotations."""
    parsed = sentences([Source("m", T0, text, (), start=T0)], ZoneInfo("UTC"))
    return [re.sub(r" \([^()]*\)", "", s.text).rstrip(".!?") for s in parsed]


def test_the_same_events_twice_give_the_same_memory(
    setup: tuple[Settings, Consolidation, EdgeShards],
) -> None:
    settings, consolidation, shards = setup
    pipeline = ingest(settings, shards, consolidation)
    store = shards.get(0)
    consolidate(pipeline)
    first = {k: m.model_dump() for k, m in memories(store).items()}
    redeliver(pipeline, settings, shards, consolidation)
    assert {k: m.model_dump() for k, m in memories(store).items()} == first
    shards.close()


@pytest.mark.slow
def test_llm_tokens_counted_equal_the_servers_usage(tmp_path: Path) -> None:
    with OpenAIServer() as server:
        server.chat_responder = respond
        settings = Settings(
            storage=StorageSettings(data_dir=tmp_path),
            embedding=EmbeddingSettings(embedder="hash"),
            llm=LlmSettings(llm_base_url=server.base_url, llm_model="m"),
        )
        embedder = HashingEmbedder(settings.embedding.hash_dim)
        shards = EdgeShards(
            tmp_path / "store",
            [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)],
        )
        consolidation = build_consolidation(settings, embedder, embedder.default_theta_sim)
        consolidate(ingest(settings, shards, consolidation))
        assert consolidation.llm is not None
        totals = consolidation.llm.usage_totals()
        assert sum(t["calls"] for t in totals.values()) == server.usage_totals["calls"] > 0
        assert sum(t["prompt_tokens"] for t in totals.values()) == server.usage_totals["prompt_tokens"]
        assert (
            sum(t["completion_tokens"] for t in totals.values()) == server.usage_totals["completion_tokens"]
        )
        shards.close()


def test_a_time_anchored_update_invalidates_the_fact_it_supersedes(tmp_path: Path) -> None:
    """Two requests about where the user lives; the second fact supersedes the first."""

    def responder(body: dict[str, Any]) -> str:
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        if "semantic memory" not in system:
            return respond(body)
        ids = [line[1:37] for line in user.splitlines() if line.startswith("[") and len(line) > 38]
        known = user.split("Known facts:")[1]
        old = [line[1:37] for line in known.splitlines() if line.startswith("[")]
        city, day = ("Porto", "2024-03-20") if old else ("Lisbon", "2024-01-10")
        fact = {
            "sentence": f"On {day} the user lives in {city}.",
            "subject": "user",
            "predicate": "lives in",
            "object": city,
            "type": "time_update",
            "valid_from": day,
            "valid_to": None,
            "unit_ids": ids[:1],
            "supersedes": old,
        }
        return json.dumps({"facts": [fact]})

    with OpenAIServer() as server:
        server.chat_responder = responder
        settings = Settings(
            storage=StorageSettings(data_dir=tmp_path),
            embedding=EmbeddingSettings(embedder="hash"),
            llm=LlmSettings(llm_base_url=server.base_url),
        )
        embedder = HashingEmbedder(settings.embedding.hash_dim)
        shards = EdgeShards(
            tmp_path / "store",
            [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)],
        )
        consolidation = build_consolidation(settings, embedder, embedder.default_theta_sim)
        pipeline = ingest(settings, shards, consolidation)
        users = {r.key for r in requests(pipeline)}
        store = shards.get(0)
        small_talk = small_talk_in(store, requests(pipeline))
        said = [r for r in requests(pipeline) if r.request_id not in small_talk]
        one_user = [r.request_id for r in said if r.key == sorted(users)[0]][:2]
        assert len(one_user) == 2
        consolidate_only(pipeline, one_user)
        facts = sorted(
            (m for m in memories(store).values() if m.kind == MemoryKind.FACT), key=lambda m: m.start
        )
        assert [f.triple.object for f in facts if f.triple] == ["Lisbon", "Porto"]
        lisbon, porto = facts
        assert lisbon.expired_at is not None and lisbon.superseded_by == porto.memory_id
        assert lisbon.end == porto.start  # it held until the update
        assert porto.current and not lisbon.current
        shards.close()


def test_invalidate_and_delete_are_idempotent(setup: tuple[Settings, Consolidation, EdgeShards]) -> None:
    settings, consolidation, shards = setup
    pipeline = ingest(settings, shards, consolidation)
    store = shards.get(0)
    consolidate_only(pipeline, [requests(pipeline)[0].request_id])
    some = next(m for m in memories(store).values() if m.kind == MemoryKind.EPISODE)
    from memstream.schemas.memory import MemoryUpdate

    delete = MemoryUpdate(
        op=MemoryOp.DELETE, memory_id=some.memory_id, tenant=some.tenant, user_id=some.user_id
    )
    asyncio.run(consolidation.indexer.apply(store, [delete, delete]))
    assert some.memory_id not in memories(store)
    shards.close()


class Counting(HashingEmbedder):
    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.texts: list[str] = []
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        self.calls.append(list(texts))
        return super().embed(texts)


class VectorsLost:
    """A store whose retrieve leaves out the vectors of ``lost`` (as an older worker's would)."""

    def __init__(self, store: VectorStore, lost: set[str]) -> None:
        self._store = store
        self._lost = lost

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def retrieve(self, collection: str, ids: Sequence[str], with_vectors: bool = False) -> list[Hit]:
        hits = self._store.retrieve(collection, ids, with_vectors)
        return [replace(h, vector=None) if h.id in self._lost else h for h in hits]


def test_recurrence_reuses_the_stored_unit_vectors_and_embeds_only_missing_ones(tmp_path: Path) -> None:
    """Ingest stored each unit with its text's vector: a request's units are not embedded again, a
    unit whose vector the store does not return is, and the updates are the same either way."""
    settings = Settings(
        storage=StorageSettings(data_dir=tmp_path), embedding=EmbeddingSettings(embedder="hash")
    )
    embedder = Counting(settings.embedding.hash_dim)
    shards = EdgeShards(
        tmp_path / "store", [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)]
    )
    pipeline = ingest(settings, shards)  # the same hashing embedder, uncounted
    store = shards.get(0)
    recurrence = build_consolidation(settings, embedder, embedder.default_theta_sim).recurrence
    req = max(requests(pipeline), key=lambda r: len(r.unit_ids))
    units = sorted(
        (unit_from_payload(h.payload) for h in store.retrieve(UNITS, req.unit_ids)),
        key=lambda u: (u.ts, u.unit_id),
    )
    assert len(units) >= 3

    reused = asyncio.run(recurrence.handle(store, req))
    assert reused and not {u.text for u in units} & set(embedder.texts)
    lost = {u.unit_id for u in units[::2]}
    embedder.calls.clear()
    partly = asyncio.run(recurrence.handle(cast(VectorStore, VectorsLost(store, lost)), req))
    assert embedder.calls[0] == [u.text for u in units if u.unit_id in lost]  # one call, those only
    everything = {u.unit_id for u in units}
    embedder.calls.clear()
    embedded = asyncio.run(recurrence.handle(cast(VectorStore, VectorsLost(store, everything)), req))
    assert embedder.calls[0] == [u.text for u in units]
    assert reused == partly == embedded
    shards.close()


def test_an_upsert_of_unchanged_text_rewrites_the_payload_without_embedding_again(tmp_path: Path) -> None:
    embedder = Counting(64)
    shards = EdgeShards(tmp_path / "store", [memories_spec(embedder.dim)])
    store = shards.get(0)
    at = datetime(2025, 1, 1, tzinfo=UTC)
    node = Memory(
        memory_id="00000000-0000-0000-0000-000000000001",
        tenant="t",
        user_id="u",
        kind=MemoryKind.SESSION,
        level=2,
        text="Maya moved to Ghent.",
        start=at,
        end=at,
        recorded_at=at,
        writer="extractive@3",
        extractive=True,
    )
    indexer = Indexer(embedder)

    def upsert(m: Memory) -> None:
        update = MemoryUpdate(
            op=MemoryOp.UPSERT, memory_id=m.memory_id, tenant=m.tenant, user_id=m.user_id, memory=m
        )
        asyncio.run(indexer.apply(store, [update]))

    upsert(node)
    upsert(node.model_copy(update={"parent_id": "00000000-0000-0000-0000-000000000002"}))  # same text
    assert embedder.texts == ["Maya moved to Ghent."]  # embedded once
    assert memories(store)[node.memory_id].parent_id == "00000000-0000-0000-0000-000000000002"
    upsert(node.model_copy(update={"text": "Maya lives in Ghent."}))  # new text: embedded
    assert embedder.texts[-1] == "Maya lives in Ghent." and len(embedder.texts) == 2
    shards.close()


def caption_turns() -> list[Turn]:
    """Two speakers over three sessions (two days of one week, then a week of one day), each turn's
    content holding a photo caption on a line of its own and a "Name: text"-looking line."""
    said = [
        ("Nate", "I adopted two turtles and they cheer me up every single day.\n[shares a photo: a turtle]"),
        ("Joanna", "I started writing a screenplay about an old lighthouse keeper.\nNote: it is due soon"),
        ("Nate", "My turtles love the new tank I built for them last weekend.\n[shares a photo of a dog]"),
    ]
    starts = [datetime(2024, 1, 1, 18), datetime(2024, 1, 2, 18), datetime(2024, 1, 15, 18)]
    return [
        Turn(
            tenant="t",
            user_id="nate",
            session_id=f"s{s}",
            turn_id=f"s{s}-{i}",
            ts=start + timedelta(minutes=i),
            messages=[Message(speaker=speaker, content=content)],
        )
        for s, start in enumerate(starts)
        for i, (speaker, content) in enumerate(said)
    ]


def test_session_day_and_week_headers_name_only_the_speakers_and_hold_no_markup(tmp_path: Path) -> None:
    settings = Settings(
        storage=StorageSettings(data_dir=tmp_path), embedding=EmbeddingSettings(embedder="hash")
    )
    embedder = HashingEmbedder(settings.embedding.hash_dim)
    shards = EdgeShards(
        tmp_path / "store", [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)]
    )
    store = shards.get(0)
    consolidate(ingest(settings, shards, turns=caption_turns()))
    headers = {
        m.memory_id: (m.kind, m.text.splitlines()[0])
        for m in memories(store).values()
        if m.kind in (MemoryKind.SESSION, MemoryKind.DAY, MemoryKind.WEEK)
    }
    kinds = [kind for kind, _ in headers.values()]
    assert kinds.count(MemoryKind.SESSION) == 3 and MemoryKind.DAY in kinds and MemoryKind.WEEK in kinds
    for kind, header in headers.values():
        assert "[" not in header and "shares a photo" not in header, header
        named = re.search(r"\(([^()]*)\):$", header)
        if kind == MemoryKind.SESSION:
            assert named is not None and named[1] == "Nate, Joanna", header
        else:  # a day's or a week's own header, even over a single child
            assert named is None and header.startswith(("Day ", "Week of ")), header
    shards.close()


def test_a_closed_session_writes_dated_third_person_observations_of_its_turns(tmp_path: Path) -> None:
    """Every session's informative turns become observations (budget 1: all of them), each naming its turn;
    the same thing said again in a later session is one memory with the day it was said again, and a
    redelivered window rewrites the same memories."""
    settings = Settings(
        storage=StorageSettings(data_dir=tmp_path),
        embedding=EmbeddingSettings(embedder="hash"),
        consolidation=ConsolidationSettings(observation_budget=1.0),
    )
    embedder = HashingEmbedder(settings.embedding.hash_dim)
    shards = EdgeShards(
        tmp_path / "store", [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)]
    )
    store = shards.get(0)
    consolidation = build_consolidation(settings, embedder, embedder.default_theta_sim)
    pipeline = ingest(settings, shards, consolidation, caption_turns())
    consolidate(pipeline)
    observed = sorted(
        (m for m in memories(store).values() if m.kind == MemoryKind.OBSERVATION), key=lambda m: m.start
    )
    assert [(m.text, m.source_turn_ids) for m in observed] == [
        (
            "Nate adopted two turtles and they cheer Nate up every single day (again 15 January 2024).",
            ["s0-0", "s1-0", "s2-0"],
        ),
        (
            "Joanna started writing a screenplay about an old lighthouse keeper (again 15 January 2024).",
            ["s0-1", "s1-1", "s2-1"],
        ),
        (  # "last weekend" said on 1 and 2 January is one weekend, on 15 January another
            "Nate's turtles love the new tank Nate built for them last weekend (the weekend of"
            " 30–31 December 2023) (again 2 January 2024).",
            ["s0-2", "s1-2"],
        ),
        (
            "Nate's turtles love the new tank Nate built for them last weekend (the weekend of"
            " 13–14 January 2024).",
            ["s2-2"],
        ),
    ]
    for m in observed:
        assert m.level == 1 and m.extractive and m.start == m.end <= m.recorded_at
        assert "[" not in m.text and "shares a photo" not in m.text
    first = {k: m.model_dump() for k, m in memories(store).items()}
    redeliver(pipeline, settings, shards, consolidation)
    assert {k: m.model_dump() for k, m in memories(store).items()} == first
    shards.close()

"""The in-process pipeline's own paths (memstream/streams/offline.py), through the topology's handlers:
a month's durative memory waits its delay on the simulated clock; an LLM outage defers work through
``deferred`` and the retries make the memory a run without the outage makes; work that never comes
due raises ``StillDeferred`` instead of looping."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

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
from memstream.core.memories import MEMORIES, memories_spec, memory_from_payload
from memstream.core.store import scroll_all
from memstream.core.unit_views import views_spec
from memstream.core.units import units_spec
from memstream.schemas.events import Deferred, WindowClosed
from memstream.schemas.memory import MemoryKind, MemoryUpdate
from memstream.schemas.topics import CONSOLIDATION, DEFERRED, MEMORY_UPDATES, WINDOWS
from memstream.streams.handlers import DURATIVE
from memstream.streams.offline import InProcess, StillDeferred
from memstream.testing.chat_responder import respond
from memstream.testing.openai_server import CHAT_PATH, ApiError, OpenAIServer

TURNS = list(generate(users=1, days=35, seed=3))  # January closes: a month's durative job
TREE = (MemoryKind.SESSION, MemoryKind.DAY, MemoryKind.WEEK, MemoryKind.PROFILE, MemoryKind.OBSERVATION)


def pipeline(settings: Settings) -> tuple[InProcess, EdgeShards]:
    dim = settings.embedding.hash_dim
    shards = EdgeShards(
        settings.storage.data_dir / "store", [units_spec(dim), views_spec(dim), memories_spec(dim)]
    )
    return InProcess(settings, HashingEmbedder(dim), shards, batch_size=64), shards


def memory_of(settings: Settings) -> tuple[InProcess, dict[str, dict[str, Any]]]:
    """A run over TURNS, and the memory it made (whole records by id)."""
    p, shards = pipeline(settings)
    try:
        asyncio.run(p.run(TURNS))
        return p, {
            h.id: memory_from_payload(h.payload).model_dump() for h in scroll_all(shards.get(0), MEMORIES)
        }
    finally:
        shards.close()


def folded(memory: dict[str, dict[str, Any]]) -> set[str]:
    return {r for m in memory.values() if m["kind"] == MemoryKind.EPISODE for r in m["request_ids"]}


def tree(memory: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: m for k, m in memory.items() if m["kind"] in TREE}


def test_durative_memory_runs_once_its_delay_has_passed_on_the_simulated_clock(tmp_path: Path) -> None:
    p, memory = memory_of(
        Settings(
            storage=StorageSettings(data_dir=tmp_path),
            embedding=EmbeddingSettings(embedder="hash"),
            consolidation=ConsolidationSettings(durative_delay_s=600),
        )
    )
    jobs = [d for d in p.topics.published(DEFERRED, Deferred) if d.reason == "durative_due"]
    due = {WindowClosed.from_bytes(d.value).window_id: d.not_before.timestamp() for d in jobs}
    assert due
    made = [
        (record.timestamp, update)
        for record in p.topics.logs[MEMORY_UPDATES.name]
        if (update := MemoryUpdate.from_bytes(record.value or b"")).memory is not None
        and update.memory.kind in (MemoryKind.TOPIC, MemoryKind.PERSONA)
    ]
    assert made and {m["kind"] for m in memory.values()} >= {MemoryKind.TOPIC, MemoryKind.PERSONA}
    for at, update in made:  # stamped with when its work began: not before the job was due
        assert update.memory is not None and update.memory.window_id is not None
        assert at is not None and at >= due[update.memory.window_id]
    # The job went round [deferred] until due: re-queued, not run early.
    assert len(p.topics.logs[DEFERRED.name]) > len(due)


def test_an_llm_outage_defers_work_and_the_retries_make_the_same_memory(tmp_path: Path) -> None:
    with OpenAIServer() as server:
        server.chat_responder = respond
        settings = Settings(
            storage=StorageSettings(data_dir=tmp_path / "calm"),
            embedding=EmbeddingSettings(embedder="hash"),
            llm=LlmSettings(llm_base_url=server.base_url, llm_model="m", llm_max_retries=0),
        )
        _, calm = memory_of(settings)
        chat, failed = server.routes[CHAT_PATH], Counter[str]()

        def down_at_first(body: dict[str, Any]) -> dict[str, Any]:
            """The first two calls of each prompt (episodes, facts, summaries, profile...) fail."""
            prompt = body["messages"][0]["content"]
            if failed[prompt] < 2:
                failed[prompt] += 1
                raise ApiError(500, "down")
            return chat(body)

        server.routes[CHAT_PATH] = down_at_first
        p, stormy = memory_of(settings.replace(data_dir=tmp_path / "stormy"))
    # Each failed call deferred its work once (a record not yet due goes round [deferred] as it is),
    # requests, windows and the durative job alike.
    deferrals = [d for d in p.topics.published(DEFERRED, Deferred) if d.reason == "llm_unavailable"]
    assert len({(d.value, d.not_before) for d in deferrals}) == failed.total() >= 6
    assert {d.source_topic for d in deferrals} == {CONSOLIDATION.name, WINDOWS.name, DURATIVE}
    # Each came back to its topic once due: a request is on [consolidation] twice.
    requests = [r.value for r in p.topics.logs[CONSOLIDATION.name]]
    assert len(requests) > len(set(requests))
    # Deferred requests are consolidated after the user's later ones, as a worker does, so episodes
    # may merge otherwise; but every request is folded in, and the tree is the same.
    assert folded(stormy) == folded(calm)
    assert tree(stormy) == tree(calm)


def test_work_that_never_comes_due_raises_still_deferred(tmp_path: Path) -> None:
    with OpenAIServer() as server:

        def down(body: dict[str, Any]) -> dict[str, Any]:
            raise ApiError(500, "down")

        server.routes[CHAT_PATH] = down
        settings = Settings(
            storage=StorageSettings(data_dir=tmp_path),
            embedding=EmbeddingSettings(embedder="hash"),
            llm=LlmSettings(llm_base_url=server.base_url, llm_model="m", llm_max_retries=0),
            consolidation=ConsolidationSettings(defer_retry_s=900),
        )
        p, shards = pipeline(settings)
        try:
            with pytest.raises(StillDeferred, match="deferred records not due"):
                asyncio.run(p.run(TURNS))
        finally:
            shards.close()

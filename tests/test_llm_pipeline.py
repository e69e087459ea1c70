"""Consolidation through the LLM inside `memstream up`, against the real broker and the
OpenAI-compatible test server over real HTTP: an LLM outage defers work and loses none of it,
token counters equal the server's usage, and `memstream reindex` rebuilds the same memories."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from memstream.adapters.broker import Broker
from memstream.adapters.kafka import read_topic
from memstream.adapters.settings import Settings
from memstream.apps.datasets import RawRecord
from memstream.apps.replay import replay
from memstream.apps.sample_conversations import generate
from memstream.apps.status import IN_FLIGHT, QUEUED, settled
from memstream.schemas.events import ConsolidationRequest, DeadLetter, DeadLetterStage
from memstream.schemas.memory import Memory, MemoryKind
from memstream.schemas.topics import CONSOLIDATION, DEAD_LETTER, DEFERRED
from memstream.testing.chat_responder import respond
from memstream.testing.openai_server import Failure, OpenAIServer
from tests.conftest import Pipeline, make_pipeline, small_talk_requests, stored, wait_for

pytestmark = pytest.mark.integration

OUTAGE = 40  # chat requests answered 500 before the endpoint recovers
GARBLED = 2  # the first facts answers are not JSON: the first answer and its repair both fail


def garbling(body: dict[str, Any], first: list[str] = []) -> str:  # noqa: B006  (remembers a request)
    """Garbles the first facts request's answer and its repair (the repair repeats the request's
    messages): requests of other users run at the same time, so calls are told apart by content."""
    messages = body["messages"]
    if "semantic memory" in messages[0]["content"]:
        first[:] = first or [messages[1]["content"]]
        if messages[1]["content"] == first[0] and len(messages) <= 2 + GARBLED:
            return "Sure! Here are the facts: the user likes tea."
    return respond(body)


@dataclass
class Run:
    pipeline: Pipeline
    server: OpenAIServer
    requests: list[ConsolidationRequest]
    status: dict[str, Any]
    cost: dict[str, Any]
    deferred: int
    dead: list[DeadLetter]


def memories(settings: Settings) -> dict[str, Memory]:
    return {m.memory_id: m for m in stored(settings)[1]}


@pytest.fixture(scope="module")
def run(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with OpenAIServer() as server:
        server.chat_responder = garbling
        server.fail(*[Failure(500)] * OUTAGE)
        pipeline = make_pipeline(
            broker,
            tmp_path_factory.mktemp("llm-pipeline"),
            MEMSTREAM_LLM_BASE_URL=server.base_url,
            MEMSTREAM_LLM_MODEL="test-model",
            MEMSTREAM_LLM_MAX_RETRIES="1",
            MEMSTREAM_LLM_BACKOFF_BASE_S="0.01",
            MEMSTREAM_LLM_CONCURRENCY="2",
            MEMSTREAM_DEFER_RETRY_S="1",
        ).start()
        settings = pipeline.settings
        try:
            turns = list(generate(users=2, days=35, seed=9))
            report = asyncio.run(
                replay(settings, [RawRecord(t.key, t.to_bytes()) for t in turns], wait=True, progress=False)
            )
            assert report.processed, pipeline.logs()

            def quiet() -> bool:
                idle = pipeline.cli("status", "--json")
                closed = (
                    orjson.loads(idle.stdout).get("memstream_windows_closed", {})
                    if idle.returncode == 0
                    else {}
                )
                return closed.get("session/idle", 0) >= 2 and asyncio.run(settled(settings))

            wait_for(quiet, 180, "consolidation to settle after the outage")
            status = orjson.loads(pipeline.cli("status", "--json").stdout)
            cost = pipeline.cli("cost", "--json")
            assert cost.returncode == 0, cost.stderr
        finally:
            pipeline.stop()
        requests = [
            ConsolidationRequest.from_bytes(v)
            for _, v in asyncio.run(read_topic(settings, settings.kafka.topic(CONSOLIDATION.name)))
        ]
        deferred = len(asyncio.run(read_topic(settings, settings.kafka.topic(DEFERRED.name))))
        dead = [
            DeadLetter.from_bytes(v)
            for _, v in asyncio.run(read_topic(settings, settings.kafka.topic(DEAD_LETTER.name)))
        ]
        yield Run(pipeline, server, requests, status, orjson.loads(cost.stdout), deferred, dead)


def test_an_llm_outage_defers_consolidation_and_loses_none(run: Run) -> None:
    assert run.deferred > 0, "the outage must have deferred some work"
    assert run.status["memstream_consolidations"].get("recurrence/deferred", 0) > 0
    units, stored_memories = stored(run.pipeline.settings)
    mem = {m.memory_id: m for m in stored_memories}
    folded = {r for m in mem.values() if m.kind == MemoryKind.EPISODE for r in m.request_ids}
    dead = {ConsolidationRequest.from_bytes(d.original).request_id for d in run.dead}
    small_talk = small_talk_requests(run.requests, units)
    # Every request is in memory, or in the dead-letter topic with its reason, or small talk only
    # (nothing to remember, no LLM call): none vanished.
    assert folded | dead | small_talk == {r.request_id for r in run.requests}
    assert not folded & dead
    kinds = Counter(m.kind for m in mem.values())
    assert kinds[MemoryKind.SESSION] and kinds[MemoryKind.FACT]
    # the LLM wrote all but the observations, which are extractive whichever writer (consumers/tree.py)
    written = [m for m in mem.values() if m.kind != MemoryKind.OBSERVATION]
    assert all(not m.extractive for m in written)
    assert {m.model for m in written} == {"test-model"}
    assert all(m.extractive and m.model is None for m in mem.values() if m.kind == MemoryKind.OBSERVATION)


def test_token_counters_equal_the_servers_usage(run: Run) -> None:
    served = run.server.usage_totals
    assert run.cost["llm_calls"] == served["calls"] > 0
    assert run.cost["prompt_tokens"] == served["prompt_tokens"]
    assert run.cost["completion_tokens"] == served["completion_tokens"]
    assert run.cost["eager_calls"] > run.cost["llm_calls"]
    assert set(run.cost["by_tenant"]) == {"default"}


def test_reindex_rebuilds_the_same_memories(run: Run) -> None:
    before = {k: m.model_dump() for k, m in memories(run.pipeline.settings).items()}
    out = run.pipeline.cli("reindex")
    assert out.returncode == 0, out.stderr
    assert f"now holds {len(before):,}" in out.stdout
    assert {k: m.model_dump() for k, m in memories(run.pipeline.settings).items()} == before


def test_llm_output_invalid_after_the_repair_is_dead_lettered(run: Run) -> None:
    assert len(run.dead) == 1
    (dead,) = run.dead
    assert (dead.stage, dead.reason) == (DeadLetterStage.CONSOLIDATE, "invalid_llm_output")
    assert dead.source_topic.endswith(CONSOLIDATION.name)
    assert ConsolidationRequest.from_bytes(dead.original).request_id in {r.request_id for r in run.requests}
    assert "facts" in dead.detail


def test_status_shows_consolidation_in_flight_while_an_llm_call_is_slow(
    broker: Broker, tmp_path: Path
) -> None:
    """`memstream status` counts the record whose LLM call is still running, and settled waits for
    it; once the calls are answered, nothing is in flight or queued."""
    with OpenAIServer() as server:
        server.chat_responder = respond
        server.chat_delay_s = 3.0
        pipeline = make_pipeline(
            broker,
            tmp_path,
            MEMSTREAM_LLM_BASE_URL=server.base_url,
            MEMSTREAM_LLM_MODEL="test-model",
            MEMSTREAM_LLM_CONCURRENCY="1",
        ).start()
        settings = pipeline.settings

        def in_flight() -> float:
            shown = pipeline.cli("status", "--json")
            return sum(orjson.loads(shown.stdout).get(IN_FLIGHT, {}).values()) if shown.returncode == 0 else 0

        try:
            turns = [RawRecord(t.key, t.to_bytes()) for t in generate(users=2, days=3, seed=9)]
            asyncio.run(replay(settings, turns, wait=True, progress=False))
            wait_for(in_flight, 120, "a consolidation record in flight")
            assert not asyncio.run(settled(settings)), "settled while a record is in flight"
            shown = pipeline.cli("status").stdout
            assert "in flight consolidation" in shown and "in flight windows" in shown, shown
            server.chat_delay_s = 0.0
            wait_for(lambda: asyncio.run(settled(settings)), 180, "consolidation to settle")
            done = orjson.loads(pipeline.cli("status", "--json").stdout)
        finally:
            pipeline.stop()
    assert sum(done[IN_FLIGHT].values()) == 0 and sum(done[QUEUED].values()) == 0, done
    assert {"consolidation", "windows", "deferred"} <= set(done[IN_FLIGHT]), done

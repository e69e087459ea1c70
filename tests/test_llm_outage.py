"""The LLM endpoint failing for a while, against the real broker and a real `memstream up` talking
to the OpenAI-compatible test server over real HTTP (answers from ``memstream.testing.chat_responder``).

* Outage: for ``MEMSTREAM_SOAK_LLM_OUTAGE_S`` seconds (45 by default) every chat request fails, in
  turn with 429 + ``Retry-After: 1``, 500, and a timeout (the server holds the request past
  ``MEMSTREAM_LLM_TIMEOUT_S``); then for 10 s the endpoint flaps (500, 500, answer, answer). The
  sample turns are replayed as it starts, so consolidation fires during it. Checked once settled:
  every consolidation request ends in an episode in the store or in the dead-letter topic with its
  reason (none in both, none missing); work was deferred with reason ``llm_unavailable`` and every
  deferred request was retried into memory and every deferred window back through its topic; each
  failure kind was served; the server never had more than ``MEMSTREAM_LLM_CONCURRENCY`` (2) chat
  requests in flight.
* Budget: a second pipeline with ``MEMSTREAM_LLM_DAILY_TOKEN_BUDGET`` small enough to run out. The
  guarantee (``memstream/adapters/llm/client.py``): a request is only sent while the tenant's spend today is
  under the budget, checked with a concurrency slot held, and billed as it returns; so tokens billed
  <= budget - 1 + llm_concurrency x the largest call (prompt + completion), per worker per UTC day.
  Work refused is deferred with reason ``token_budget`` until the next UTC midnight: it is re-queued
  on the deferred topic (so it holds up nothing behind it) until then, neither dead-lettered nor lost.

The soak ("minutes") variant:

    MEMSTREAM_SOAK_LLM_OUTAGE_S=300 .venv/bin/pytest tests/test_llm_outage.py -s -m integration

Figures are printed with ``-s``.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import ConsumerRecord
from pydantic import BaseModel

from memstream.adapters.broker import Broker
from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.adapters.kafka import consumed, read_records, settled
from memstream.adapters.llm import LLMClient, LLMUnavailable
from memstream.adapters.settings import EmbeddingSettings, LlmSettings, Settings, StorageSettings
from memstream.adapters.store import scroll_all
from memstream.adapters.store.shards import EdgeShards
from memstream.apps.datasets import RawRecord
from memstream.apps.replay import replay
from memstream.apps.sample_conversations import generate
from memstream.consumers import build_consolidation
from memstream.core.memories import memories_spec
from memstream.core.unit_views import views_spec
from memstream.core.units import UNITS, unit_from_payload, units_spec
from memstream.schemas.events import ConsolidationRequest, DeadLetter, Deferred, WindowClosed
from memstream.schemas.memory import Memory, MemoryKind
from memstream.schemas.topics import CONSOLIDATION, DEAD_LETTER, DEFERRED, MEMORY_UPDATES, WINDOWS
from memstream.streams.offline import InProcess
from memstream.testing.chat_responder import respond
from memstream.testing.openai_server import CHAT_PATH, ApiError, Failure, OpenAIServer
from tests.conftest import Pipeline, committed, make_pipeline, small_talk_requests, stored, wait_for

pytestmark = pytest.mark.integration

OUTAGE_S = float(os.environ.get("MEMSTREAM_SOAK_LLM_OUTAGE_S", "45"))
FLAP_S = 10.0  # after the outage: 500, 500, answer, answer, ... (a facts call can fail after its episode)
TIMEOUT_S = 1.0  # MEMSTREAM_LLM_TIMEOUT_S; a timeout failure holds the request 3 s
CONCURRENCY = 2
BUDGET = 15_000  # tokens per tenant per day: the sample needs ~115k, a call 200-900
TURNS = list(generate(users=2, days=35, seed=9))


def llm_env(server: OpenAIServer, **extra: str) -> dict[str, str]:
    return {
        "MEMSTREAM_LLM_BASE_URL": server.base_url,
        "MEMSTREAM_LLM_MODEL": "test-model",
        "MEMSTREAM_LLM_TIMEOUT_S": str(TIMEOUT_S),
        "MEMSTREAM_LLM_MAX_RETRIES": "1",
        "MEMSTREAM_LLM_BACKOFF_BASE_S": "0.05",
        "MEMSTREAM_LLM_BACKOFF_MAX_S": "1",
        "MEMSTREAM_LLM_CONCURRENCY": str(CONCURRENCY),
        "MEMSTREAM_DEFER_RETRY_S": "1",
        **extra,
    }


def status(pipeline: Pipeline) -> dict[str, Any]:
    out = pipeline.cli("status", "--json")
    return orjson.loads(out.stdout) if out.returncode == 0 else {}


def idle_closed(pipeline: Pipeline) -> bool:
    """The replay's last sessions were closed by the idle timer (so their windows were published)."""
    return bool(status(pipeline).get("memstream_windows_closed", {}).get("session/idle", 0) >= 2)


def replay_sample(pipeline: Pipeline) -> None:
    records = [RawRecord(t.key, t.to_bytes()) for t in TURNS]
    report = asyncio.run(replay(pipeline.settings, records, wait=True, progress=False))
    assert report.processed, pipeline.logs()


Rec = ConsumerRecord[Any, Any]


def read(settings: Settings, spec_name: str, idle_s: float = 1.0) -> list[Rec]:
    """Every record of a topic from the beginning, with its partition and offset."""
    return [
        m for m in asyncio.run(read_records(settings, settings.kafka.topic(spec_name), idle_s)) if m.value
    ]


@dataclass
class Outcome:
    """What a run left behind, read once its pipeline stopped."""

    requests: set[str]
    folded: set[str]  # request ids in some episode of the store
    small_talk: set[str]  # request ids of small talk only: they make nothing, with no LLM call
    dead: list[DeadLetter]
    dead_requests: set[str]
    deferred: list[tuple[Rec, Deferred]]
    memories: list[Memory]
    windows: list[WindowClosed]


def waiting(settings: Settings) -> set[bytes]:
    """The work on the deferred topic not yet consumed by the pipeline's group."""
    offsets = committed(settings, settings.kafka.topic(DEFERRED.name))
    return {
        r.value for r in read(settings, DEFERRED.name, idle_s=0.3) if r.offset >= (offsets[r.partition] or 0)
    }


def outcome(settings: Settings) -> Outcome:
    sent = [ConsolidationRequest.from_bytes(r.value) for r in read(settings, CONSOLIDATION.name)]
    requests = {r.request_id for r in sent}
    dead = [DeadLetter.from_bytes(r.value) for r in read(settings, DEAD_LETTER.name)]
    dead_requests = {
        ConsolidationRequest.from_bytes(d.original).request_id
        for d in dead
        if d.source_topic.endswith(CONSOLIDATION.name)
    }
    deferred = [(r, Deferred.from_bytes(r.value)) for r in read(settings, DEFERRED.name)]
    windows = [WindowClosed.from_bytes(r.value) for r in read(settings, WINDOWS.name)]
    units, memories = stored(settings)
    folded = {r for m in memories if m.kind == MemoryKind.EPISODE for r in m.request_ids}
    small_talk = small_talk_requests(sent, units)
    return Outcome(requests, folded, small_talk, dead, dead_requests, deferred, memories, windows)


def deferred_requests(o: Outcome, reason: str) -> set[str]:
    return {
        ConsolidationRequest.from_bytes(d.value).request_id
        for _, d in o.deferred
        if d.reason == reason and d.source_topic == CONSOLIDATION.name
    }


# --- the outage --------------------------------------------------------------------------------


@dataclass
class OutageRun:
    pipeline: Pipeline
    server: OpenAIServer
    out: Outcome
    status: dict[str, Any]
    replayed_s: float  # seconds into the outage the replay was all ingested
    settle_s: float  # from the end of the flapping (endpoint healthy) to settled


@pytest.fixture(scope="module")
def outage(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OutageRun]:
    with OpenAIServer() as server:
        server.chat_responder = respond
        pipeline = make_pipeline(broker, tmp_path_factory.mktemp("llm-outage"), **llm_env(server))
        start = time.monotonic()
        healthy_at = start + OUTAGE_S + FLAP_S
        server.fail_until(
            start + OUTAGE_S,
            Failure(429, retry_after="1"),
            Failure(500),
            Failure(delay_s=TIMEOUT_S + 2),
        )
        server.fail_until(healthy_at, Failure(500), Failure(500), None, None)
        pipeline.start()
        try:
            replay_sample(pipeline)
            replayed_s = time.monotonic() - start
            time.sleep(max(0.0, healthy_at - time.monotonic()))
            wait_for(
                lambda: idle_closed(pipeline) and asyncio.run(settled(pipeline.settings)),
                180,
                "consolidation to settle after the outage",
            )
            settle_s = time.monotonic() - healthy_at
            final = status(pipeline)
        finally:
            pipeline.stop()
        yield OutageRun(pipeline, server, outcome(pipeline.settings), final, replayed_s, settle_s)


def test_an_llm_outage_defers_consolidation_retries_it_and_loses_none(outage: OutageRun) -> None:
    o, server = outage.out, outage.server
    reasons = Counter(d.reason for _, d in o.deferred)
    chat = sum(1 for path, _ in server.requests if path == CHAT_PATH)
    kinds = dict(server.failures_served)
    tree_windows = {m.window_id for m in o.memories if m.window_id}
    deferred_windows = {
        WindowClosed.from_bytes(d.value).window_id
        for _, d in o.deferred
        if d.reason == "llm_unavailable" and d.source_topic == WINDOWS.name
    }
    print(
        f"\nLLM outage: {OUTAGE_S:.0f} s failing + {FLAP_S:.0f} s flapping; replay ingested"
        f" {outage.replayed_s:.1f} s in; settled {outage.settle_s:.1f} s after the endpoint recovered"
        f"\n  chat requests served: {chat} = {server.usage_totals['calls']} answered + failures {kinds}"
        f"\n  deferred records by reason: {dict(reasons)}"
        f"\n  max chat requests in flight at the server: {server.max_in_flight} (limit {CONCURRENCY})"
        f"\n  consolidation requests: {len(o.requests)}; folded {len(o.folded & o.requests)},"
        f" dead-lettered {len(o.dead_requests)}, small talk {len(o.small_talk)},"
        f" lost {len(o.requests - o.folded - o.dead_requests - o.small_talk)}"
        f"\n  windows closed: {len({w.window_id for w in o.windows})}; with a tree node"
        f" {len({w.window_id for w in o.windows} & tree_windows)}; deferred {len(deferred_windows)},"
        f" of them with a node of their own id {len(deferred_windows & tree_windows)}"
        f"\n  worker: consolidations {outage.status.get('memstream_consolidations')}"
        f"\n  worker: LLM calls {outage.status.get('memstream_llm_calls')}"
    )
    # Consolidation fired during the outage and every kind of failure was served.
    assert reasons["llm_unavailable"] > 0
    assert set(reasons) <= {"llm_unavailable", "durative_due"}
    assert all(kinds.get(k, 0) > 0 for k in ("429", "500", "timeout")), kinds
    # None lost: every request in an episode or dead-lettered with its reason (or small talk only:
    # nothing to remember), never both.
    assert o.requests
    assert o.folded | o.dead_requests | o.small_talk == o.requests
    assert not o.folded & o.dead_requests
    assert all(d.reason and d.stage for d in o.dead)
    assert not {d.reason for d in o.dead} & {"llm_unavailable", "token_budget"}
    # Deferred work was retried: every deferred request and window is in memory now.
    assert deferred_requests(o, "llm_unavailable") <= o.folded
    # A window is retried by going back to the windows topic (all of it consumed once settled). Its
    # own node is not checked: a window may write nothing, or its node be rewritten by a later one.
    on_topic = Counter(w.window_id for w in o.windows)
    assert all(on_topic[w] >= 2 for w in deferred_windows)
    # A user's windows are summarised in the order they closed, the later ones parked behind a
    # deferred one: no day or week takes a child that started before its window (a session
    # deferred while its day went on would be swept into a later day).
    closed = {w.window_id: w for w in o.windows}
    by_id = {m.memory_id: m for m in o.memories}
    swept = [
        (node.memory_id, child)
        for node in o.memories
        if node.kind in (MemoryKind.DAY, MemoryKind.WEEK) and node.window_id in closed
        for child in node.children
        if child in by_id and by_id[child].start < closed[node.window_id].start
    ]
    assert not swept, swept
    # The concurrency limit held (a timed-out request stops counting once its client hangs up).
    assert server.max_in_flight <= CONCURRENCY


def test_the_workers_token_counters_equal_the_servers_usage_after_the_outage(outage: OutageRun) -> None:
    tokens = outage.status["memstream_llm_tokens"]
    served = outage.server.usage_totals
    assert sum(v for k, v in tokens.items() if k.endswith("/prompt")) == served["prompt_tokens"]
    assert sum(v for k, v in tokens.items() if k.endswith("/completion")) == served["completion_tokens"]


# --- the token budget --------------------------------------------------------------------------


@dataclass
class BudgetRun:
    server: OpenAIServer
    out: Outcome
    status: dict[str, Any]
    committed: dict[int, int | None]  # deferred topic, per partition
    seconds: float


@pytest.fixture(scope="module")
def budget(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BudgetRun]:
    with OpenAIServer() as server:
        server.chat_responder = respond
        pipeline = make_pipeline(
            broker,
            tmp_path_factory.mktemp("llm-budget"),
            **llm_env(server, MEMSTREAM_LLM_DAILY_TOKEN_BUDGET=str(BUDGET)),
        )
        start = time.monotonic()
        pipeline.start()
        settings = pipeline.settings
        try:
            replay_sample(pipeline)
            seen: list[set[bytes]] = []

            def quiet() -> bool:
                # Not `settled()`: work deferred to the budget's reset is re-queued on the deferred
                # topic until UTC midnight. Everything else done, and the same work waiting twice.
                if not idle_closed(pipeline):
                    return False
                done = asyncio.run(
                    consumed(
                        settings,
                        [settings.kafka.topic(s.name) for s in (CONSOLIDATION, WINDOWS, MEMORY_UPDATES)],
                    )
                )
                seen.append(waiting(settings) if done else set())
                return len(seen) >= 2 and seen[-1] == seen[-2] != set()

            wait_for(quiet, 180, "consolidation to stop under the spent budget", poll=1.0)
            final = status(pipeline)
            offsets = committed(settings, settings.kafka.topic(DEFERRED.name))
            seconds = time.monotonic() - start
        finally:
            pipeline.stop()
        yield BudgetRun(server, outcome(settings), final, offsets, seconds)


def test_a_spent_budget_defers_to_the_reset_and_never_overshoots_more_than_the_guarantee(
    budget: BudgetRun,
) -> None:
    o, server = budget.out, budget.server
    spent = server.usage_totals["prompt_tokens"] + server.usage_totals["completion_tokens"]
    largest = max(server.chat_tokens)
    bound = BUDGET - 1 + CONCURRENCY * largest
    reasons = Counter(d.reason for _, d in o.deferred)
    pending = [(r, d) for r, d in o.deferred if r.offset >= (budget.committed[r.partition] or 0)]
    pending_requests = {
        ConsolidationRequest.from_bytes(d.value).request_id
        for _, d in pending
        if d.source_topic == CONSOLIDATION.name
    }
    tokens = budget.status["memstream_llm_tokens"]
    print(
        f"\nLLM token budget {BUDGET:,}/tenant/day, concurrency {CONCURRENCY}; run {budget.seconds:.1f} s"
        f"\n  tokens billed by the server: {spent:,} in {server.usage_totals['calls']} calls"
        f" (largest call {largest}); guarantee <= {bound:,}; worker counted"
        f" {int(sum(tokens.values())):,}"
        f"\n  deferred records by reason: {dict(reasons)}; still on the deferred topic (uncommitted):"
        f" {len(pending)}, of them {len(pending_requests)} consolidation requests"
        f"\n  max chat requests in flight at the server: {server.max_in_flight} (limit {CONCURRENCY})"
        f"\n  consolidation requests: {len(o.requests)}; folded {len(o.folded & o.requests)},"
        f" dead-lettered {len(o.dead_requests)}, waiting for the reset {len(pending_requests)},"
        f" small talk {len(o.small_talk)},"
        f" lost {len(o.requests - o.folded - o.dead_requests - pending_requests - o.small_talk)}"
        f"\n  worker: LLM calls {budget.status.get('memstream_llm_calls')}"
    )
    # The budget ran out during the run, and held to its guarantee.
    assert BUDGET <= spent <= bound
    assert sum(tokens.values()) == spent  # the worker's count is the server's
    assert server.max_in_flight <= CONCURRENCY
    # Refused work is deferred to the next UTC midnight, still on the topic: not retried, not dropped.
    assert reasons["token_budget"] > 0
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    refused = {d.value for _, d in o.deferred if d.reason == "token_budget"}
    assert all(d.not_before == midnight for _, d in o.deferred if d.reason == "token_budget")
    # Re-queued (the deferred topic is not held until midnight), never dropped: every piece of
    # refused work has a copy not yet consumed.
    assert refused <= {d.value for _, d in pending}, "a budget deferral was dropped"
    assert not o.dead, [(d.stage, d.reason) for d in o.dead]
    # None lost: every request in an episode, or waiting on the deferred topic for the reset (or
    # small talk only: nothing to remember).
    assert pending_requests
    assert o.folded | pending_requests | o.small_talk == o.requests
    assert not o.folded & pending_requests


# --- without the broker: the two pieces these runs rely on -------------------------------------


class Empty(BaseModel):
    pass


async def test_a_timed_out_request_stops_counting_in_flight_when_its_client_hangs_up() -> None:
    with OpenAIServer() as server:
        server.fail(*[Failure(delay_s=5.0)] * 6)
        settings = Settings(
            llm=LlmSettings(
                llm_base_url=server.base_url,
                llm_model="m",
                llm_timeout_s=0.3,
                llm_max_retries=0,
                llm_concurrency=2,
            )
        )
        client = LLMClient(settings.llm)
        started = time.monotonic()
        messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        results = await asyncio.gather(
            *(client.structured("x", "t", messages, Empty) for _ in range(6)), return_exceptions=True
        )
        await client.aclose()
        elapsed = time.monotonic() - started
        await asyncio.to_thread(wait_for, lambda: server.in_flight == 0, 5, "the server's threads", 0.05)
    assert all(isinstance(r, LLMUnavailable) for r in results), results
    assert server.failures_served["timeout"] == 6
    assert server.max_in_flight == CONCURRENCY  # not 6: each hung-up request stopped counting
    assert elapsed < 3.0  # three rounds of two 0.3 s timeouts


async def test_a_request_waiting_for_a_slot_is_refused_once_the_budget_is_spent() -> None:
    """The budget is checked again when a request gets its concurrency slot: calls that passed the
    first check together are not all sent once the ones ahead of them have spent the budget."""
    with OpenAIServer() as server:
        server.chat_delay_s = 0.2
        budget = 6  # a call costs 4 tokens: 3 prompt words + "{}"
        settings = Settings(
            llm=LlmSettings(
                llm_base_url=server.base_url, llm_model="m", llm_concurrency=2, llm_daily_token_budget=budget
            )
        )
        client = LLMClient(settings.llm)
        messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u v"}]
        results = await asyncio.gather(
            *(client.structured("x", "t", messages, Empty) for _ in range(5)), return_exceptions=True
        )
        await client.aclose()
    billed = sum(server.chat_tokens)
    refused = [type(r).__name__ for r in results].count("BudgetExhausted")
    # Two go out at once (8 tokens); a third may start while only one is billed (4 < 6). Before the
    # check with the slot held, all five were sent: 20 tokens.
    assert refused >= 2 and server.usage_totals["calls"] == 5 - refused
    assert budget <= billed <= budget - 1 + CONCURRENCY * max(server.chat_tokens)


def test_a_request_deferred_after_its_episode_is_folded_when_retried() -> None:
    """The facts call fails after the episode call succeeded: the request is deferred, and its retry
    must write the episode (it used to find it in the consolidator's memory of recent episodes and
    write nothing: the request was lost)."""
    with tempfile.TemporaryDirectory() as tmp, OpenAIServer() as server:
        server.chat_responder = respond
        settings = Settings(
            storage=StorageSettings(data_dir=Path(tmp)),
            embedding=EmbeddingSettings(embedder="hash"),
            llm=LlmSettings(llm_base_url=server.base_url, llm_model="m", llm_max_retries=0),
        )
        embedder = HashingEmbedder(settings.embedding.hash_dim)
        shards = EdgeShards(
            Path(tmp) / "store",
            [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)],
        )
        try:
            consolidation = build_consolidation(settings, embedder, embedder.default_theta_sim)
            pipeline = InProcess(settings, embedder, shards, consolidation, batch_size=64)
            asyncio.run(pipeline.ingest(generate(users=1, days=20, seed=3)))
            requests = pipeline.topics.published(CONSOLIDATION, ConsolidationRequest)
            chat = server.routes[CHAT_PATH]
            failed: list[int] = []

            def facts_fail_once(body: dict[str, Any]) -> dict[str, Any]:
                if "semantic memory" in body["messages"][0]["content"] and not failed:
                    failed.append(1)
                    raise ApiError(500, "down")
                return chat(body)

            server.routes[CHAT_PATH] = facts_fail_once
            units = [unit_from_payload(h.payload) for h in scroll_all(shards.get(0), UNITS)]
            chit_chat = small_talk_requests(requests, units)
            request = next(r for r in requests if r.request_id not in chit_chat)
            with pytest.raises(LLMUnavailable):
                asyncio.run(consolidation.recurrence.handle(shards.get(0), request))
            updates = asyncio.run(consolidation.recurrence.handle(shards.get(0), request))
        finally:
            shards.close()
    episodes = [u.memory for u in updates if u.memory and u.memory.kind == MemoryKind.EPISODE]
    assert episodes and all(request.request_id in e.request_ids for e in episodes)

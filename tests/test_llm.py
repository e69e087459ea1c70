"""The consolidation LLM layer against a real-HTTP OpenAI-compatible server
(memstream/testing/openai_server.py), and its token budget as a pure unit."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from pydantic import BaseModel

from memstream.adapters import metrics
from memstream.adapters.llm import (
    BudgetExhausted,
    InvalidOutput,
    LLMClient,
    LLMError,
    LLMUnavailable,
    TokenBudget,
    TruncatedOutput,
    response_format,
    retry_after_s,
    stage_config,
)
from memstream.adapters.settings import LlmSettings, Settings
from memstream.adapters.store.edge import EdgeStore
from memstream.consumers.llm_writer import LLMWriter
from memstream.consumers.writer import ProfileRequest, Scope, Source, SummaryRequest
from memstream.core.store import VectorStore
from memstream.schemas.events import DeadLetterStage
from memstream.schemas.memory import MemoryKind
from memstream.schemas.topics import CONSOLIDATION, MEMORY_UPDATES
from memstream.streams.decisions import DeadLettered
from memstream.streams.handlers import Consolidating
from memstream.streams.ingest import Incoming
from memstream.streams.read_your_writes import OwnWrites, ReadYourWrites, Takeover
from memstream.testing.chat_responder import respond
from memstream.testing.openai_server import CHAT_PATH, Failure, OpenAIServer

MESSAGES = [
    {"role": "system", "content": "Extract the facts as JSON."},
    {"role": "user", "content": "I ran 10k last weekend with Anna"},
]
GOOD = '{"facts": ["ran 10k", "with Anna"]}'


class Facts(BaseModel):
    facts: list[str]


class Empty(BaseModel):
    pass


class Sleeps:
    """A fake ``sleep`` that records the delays asked for and does not wait."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as s:
        yield s


@pytest.fixture
def tenant() -> str:
    # The Prometheus registry is process-global: a tenant of its own keeps each test's counters apart.
    return f"t-{uuid.uuid4().hex[:8]}"


def make_settings(server: OpenAIServer, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "llm_base_url": server.base_url,
        "llm_api_key": "test-key",
        "llm_model": "test-chat",
        "llm_max_retries": 3,
        "llm_backoff_base_s": 0.001,
        "llm_backoff_max_s": 0.004,
        "llm_timeout_s": 5.0,
        **overrides,
    }
    return Settings().replace(**values)


def chat_requests(server: OpenAIServer) -> list[dict[str, Any]]:
    return [body for path, body in server.requests if path == CHAT_PATH]


def calls(stage: str, model: str, tenant: str, outcome: str) -> float:
    labels = {"stage": stage, "model": model, "tenant": tenant, "outcome": outcome}
    return REGISTRY.get_sample_value("memstream_llm_calls_total", labels) or 0.0


def tokens(stage: str, model: str, tenant: str, kind: str) -> float:
    labels = {"stage": stage, "model": model, "tenant": tenant, "kind": kind}
    return REGISTRY.get_sample_value("memstream_llm_tokens_total", labels) or 0.0


# --- success, request shape, stage overrides -----------------------------------------------------


async def test_structured_parses_and_counts_the_servers_usage(server: OpenAIServer, tenant: str) -> None:
    server.reply(GOOD)
    client = LLMClient(make_settings(server).llm)
    result = await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()

    assert result.value == Facts(facts=["ran 10k", "with Anna"])
    assert (result.calls, result.model) == (1, "test-chat")
    assert result.prompt_tokens == server.usage_totals["prompt_tokens"] == 12
    assert result.completion_tokens == server.usage_totals["completion_tokens"] == 5
    [body] = chat_requests(server)
    assert body["messages"] == MESSAGES
    schema = {"name": "Facts", "schema": Facts.model_json_schema()}
    assert body["response_format"] == {"type": "json_schema", "json_schema": schema}
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("test-chat", 800, 0.0)
    assert client.budget.totals() == {tenant: 17}
    assert client.usage_totals() == {
        ("fact", "test-chat", tenant): {"calls": 1, "prompt_tokens": 12, "completion_tokens": 5}
    }


async def test_stage_overrides_reach_the_server(server: OpenAIServer, tenant: str) -> None:
    settings = make_settings(
        server, llm_stages={"episode": {"model": "big-model", "max_tokens": 900, "temperature": 0.7}}
    )
    client = LLMClient(settings.llm)
    episode = await client.structured("episode", tenant, MESSAGES, Empty)
    fact = await client.structured("fact", tenant, MESSAGES, Empty)
    await client.aclose()

    first, second = chat_requests(server)
    assert (first["model"], first["max_tokens"], first["temperature"]) == ("big-model", 900, 0.7)
    assert (second["model"], second["max_tokens"], second["temperature"]) == ("test-chat", 800, 0.0)
    assert (episode.model, fact.model) == ("big-model", "test-chat")
    assert calls("episode", "big-model", tenant, "ok") == calls("fact", "test-chat", tenant, "ok") == 1


def test_stage_config_validates_and_hides_the_key() -> None:
    settings = Settings(
        llm=LlmSettings(
            llm_base_url="http://llm/v1",
            llm_api_key="sk-secret",
            llm_stages={"month": {"base_url": "http://big/v1", "api_key": "sk-other", "timeout_s": 120}},
        )
    )
    month = stage_config(settings.llm, "month")
    assert (month.base_url, month.api_key, month.timeout_s, month.model) == (
        "http://big/v1",
        "sk-other",
        120.0,
        "gpt-4o-mini",
    )
    assert stage_config(settings.llm, "fact").api_key == "sk-secret"
    assert "sk-" not in repr(month)
    with pytest.raises(ValueError, match=r"unknown keys \['max_token'\]"):
        stage_config(LlmSettings(llm_base_url="http://llm/v1", llm_stages={"x": {"max_token": 5}}), "x")
    with pytest.raises(ValueError, match="MEMSTREAM_LLM_BASE_URL"):
        stage_config(LlmSettings(), "fact")


# --- retries --------------------------------------------------------------------------------------


async def test_retries_429_honouring_retry_after_and_5xx(server: OpenAIServer, tenant: str) -> None:
    server.fail(Failure(429, retry_after_s=0.25), Failure(500), Failure(503))
    server.reply(GOOD)
    sleeps = Sleeps()
    client = LLMClient(make_settings(server).llm, sleep=sleeps, rng=lambda: 1.0)
    result = await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()

    assert result.value.facts == ["ran 10k", "with Anna"]
    assert len(chat_requests(server)) == 4
    # The server's 250 ms beat the 1 ms backoff; then 2 ms, 4 ms (capped by llm_backoff_max_s).
    assert sleeps.delays == pytest.approx([0.25, 0.002, 0.004])
    assert calls("fact", "test-chat", tenant, "retry") == 3
    assert calls("fact", "test-chat", tenant, "ok") == 1


async def test_backoff_has_full_jitter(server: OpenAIServer, tenant: str) -> None:
    server.fail(Failure(500), Failure(500))
    sleeps = Sleeps()
    client = LLMClient(make_settings(server).llm, sleep=sleeps, rng=lambda: 0.5)
    await client.structured("fact", tenant, MESSAGES, Empty)
    await client.aclose()
    assert sleeps.delays == pytest.approx([0.0005, 0.001])


async def test_retries_timeouts(server: OpenAIServer, tenant: str) -> None:
    server.fail(Failure(delay_s=1.0))
    server.reply(GOOD)
    client = LLMClient(make_settings(server, llm_stages={"fact": {"timeout_s": 0.2}}).llm, sleep=Sleeps())
    result = await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()

    assert result.value.facts == ["ran 10k", "with Anna"]
    assert len(chat_requests(server)) == 2
    # The timed-out request was never answered, so only the second is billed.
    assert server.usage_totals["calls"] == result.calls == 1
    assert result.prompt_tokens == server.usage_totals["prompt_tokens"]


async def test_client_errors_are_not_retried(server: OpenAIServer, tenant: str) -> None:
    server.fail(Failure(400))
    sleeps = Sleeps()
    client = LLMClient(make_settings(server).llm, sleep=sleeps)
    with pytest.raises(LLMError, match=r"HTTP 400, which is not retried") as info:
        await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()
    assert not isinstance(info.value, LLMUnavailable)
    assert len(chat_requests(server)) == 1
    assert sleeps.delays == []
    assert calls("fact", "test-chat", tenant, "failed") == 1


async def test_retries_exhausted_raise_unavailable(server: OpenAIServer, tenant: str) -> None:
    server.fail(*[Failure(500)] * 5)
    client = LLMClient(make_settings(server, llm_max_retries=2).llm, sleep=Sleeps())
    with pytest.raises(LLMUnavailable) as info:
        await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()
    assert (info.value.stage, info.value.attempts) == ("fact", 3)
    assert isinstance(info.value.last_error, openai.InternalServerError)
    assert len(chat_requests(server)) == 3
    assert calls("fact", "test-chat", tenant, "retry") == 2
    assert calls("fact", "test-chat", tenant, "failed") == 1
    assert client.budget.totals() == {}


def test_retry_after_headers() -> None:
    now = datetime(2024, 5, 8, 12, 0, tzinfo=UTC)
    assert retry_after_s({}, now) is None
    assert retry_after_s({"retry-after-ms": "1500"}, now) == 1.5
    assert retry_after_s({"retry-after": "3"}, now) == 3.0
    assert retry_after_s({"retry-after": "2", "retry-after-ms": "2500"}, now) == 2.5
    assert retry_after_s({"retry-after": "Wed, 08 May 2024 12:00:07 GMT"}, now) == 7.0
    assert retry_after_s({"retry-after": "soon"}, now) is None
    assert retry_after_s({"retry-after": "-4"}, now) == 0.0


# --- invalid output and its repair ----------------------------------------------------------------


@pytest.mark.parametrize("bad", ["Sure! The facts are: ran 10k.", '{"facts": "ran 10k"}'])
async def test_invalid_output_is_repaired_once(server: OpenAIServer, tenant: str, bad: str) -> None:
    server.reply(bad, GOOD)
    client = LLMClient(make_settings(server).llm)
    result = await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()

    assert result.value.facts == ["ran 10k", "with Anna"]
    assert result.calls == 2 == server.usage_totals["calls"]
    assert result.prompt_tokens == server.usage_totals["prompt_tokens"]
    assert result.completion_tokens == server.usage_totals["completion_tokens"]
    repair = chat_requests(server)[1]["messages"]
    assert repair[:2] == MESSAGES
    assert repair[2] == {"role": "assistant", "content": bad}
    assert repair[3]["role"] == "user"
    assert "ONLY the corrected JSON" in repair[3]["content"]
    assert '"facts"' in repair[3]["content"]  # the schema
    assert calls("fact", "test-chat", tenant, "invalid") == 1
    assert calls("fact", "test-chat", tenant, "repaired") == 1


async def test_still_invalid_raises_and_both_calls_are_billed(server: OpenAIServer, tenant: str) -> None:
    server.reply("not json", "still not json")
    client = LLMClient(make_settings(server).llm)
    with pytest.raises(InvalidOutput) as info:
        await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()

    assert (info.value.stage, info.value.raw_text) == ("fact", "still not json")
    assert len(chat_requests(server)) == 2
    billed = server.usage_totals["prompt_tokens"] + server.usage_totals["completion_tokens"]
    assert client.budget.totals() == {tenant: billed}
    assert calls("fact", "test-chat", tenant, "invalid") == 2


# --- what real servers do: formats they reject, fenced JSON, answers cut at the limit, slowness ---

LONG = json.dumps({"facts": [f"fact number {i}" for i in range(12)]})  # 37 words: over 16 tokens


async def test_auto_steps_down_from_a_rejected_json_schema_and_keeps_the_step(
    server: OpenAIServer, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    server.rejected_formats = {"json_schema"}  # as llama.cpp's server: 500 naming the format
    server.reply(GOOD, GOOD)
    client = LLMClient(make_settings(server).llm, sleep=Sleeps())
    with caplog.at_level("WARNING"):
        await client.structured("fact", tenant, MESSAGES, Facts)
        await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()

    sent = [body["response_format"]["type"] for body in chat_requests(server)]
    assert sent == ["json_schema", "json_object", "json_object"]  # the second call asks json_object at once
    assert chat_requests(server)[1]["response_format"]["schema"] == Facts.model_json_schema()
    assert calls("fact", "test-chat", tenant, "format_rejected") == 1
    assert calls("fact", "test-chat", tenant, "retry") == 0
    [record] = [r for r in caplog.records if r.name == "memstream.adapters.llm.client"]
    assert record.levelname == "WARNING"
    assert "json_schema" in record.getMessage() and "HTTP 500" in record.getMessage()
    assert "10k" not in caplog.text  # no prompt text


async def test_auto_ends_at_no_format_and_reads_fenced_json(server: OpenAIServer, tenant: str) -> None:
    server.rejected_formats = {"json_schema", "json_object"}
    server.fence_json = True
    server.reply(GOOD)
    client = LLMClient(make_settings(server).llm, sleep=Sleeps())
    result = await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()

    assert result.value.facts == ["ran 10k", "with Anna"]
    assert result.calls == 1  # the fence needed no repair
    formats = [body.get("response_format", {}).get("type") for body in chat_requests(server)]
    assert formats == ["json_schema", "json_object", None]


@pytest.mark.parametrize("name", ["json_schema", "json_object", "none"])
async def test_a_set_format_is_sent_and_never_stepped_down(
    server: OpenAIServer, tenant: str, name: str
) -> None:
    server.rejected_formats = {name}
    server.reply(GOOD)
    client = LLMClient(make_settings(server, llm_response_format=name, llm_max_retries=1).llm, sleep=Sleeps())
    if name == "none":  # nothing is sent, so nothing is rejected
        await client.structured("fact", tenant, MESSAGES, Facts)
    else:
        with pytest.raises(LLMUnavailable):
            await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()
    expected = [response_format(name, Facts)] * (1 if name == "none" else 2)
    assert [body.get("response_format") for body in chat_requests(server)] == expected
    assert calls("fact", "test-chat", tenant, "format_rejected") == 0


async def test_a_5xx_that_names_no_format_is_retried_not_stepped_down(
    server: OpenAIServer, tenant: str
) -> None:
    server.fail(Failure(500))
    server.reply(GOOD)
    client = LLMClient(make_settings(server).llm, sleep=Sleeps())
    await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()
    assert [body["response_format"]["type"] for body in chat_requests(server)] == ["json_schema"] * 2
    assert client.response_format_name(client.config("fact")) == "json_schema"


async def test_an_answer_cut_at_the_limit_is_its_own_failure_without_a_repair(
    server: OpenAIServer, tenant: str
) -> None:
    server.cut_at_max_tokens = True
    server.reply(LONG)
    client = LLMClient(make_settings(server, llm_max_tokens=16).llm)
    with pytest.raises(TruncatedOutput) as info:
        await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()

    assert isinstance(info.value, InvalidOutput)  # dead-lettered like invalid output, with its own reason
    assert (info.value.reason, info.value.max_tokens) == ("truncated_llm_output", 16)
    assert "cut at its limit of 16 tokens" in str(info.value)
    assert len(chat_requests(server)) == 1  # a repair would be cut the same way
    assert calls("fact", "test-chat", tenant, "truncated") == 1
    assert calls("fact", "test-chat", tenant, "invalid") == 0
    assert client.budget.totals() == {tenant: server.chat_tokens[0]}  # the cut answer is still billed


async def test_an_answer_cut_at_the_limit_is_tried_once_more_with_the_larger_limit(
    server: OpenAIServer, tenant: str
) -> None:
    server.cut_at_max_tokens = True
    server.reply(LONG, LONG)
    client = LLMClient(make_settings(server, llm_max_tokens=16, llm_truncated_retry_max_tokens=100).llm)
    result = await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()

    assert len(result.value.facts) == 12
    assert [body["max_tokens"] for body in chat_requests(server)] == [16, 100]
    assert result.calls == 2
    assert result.completion_tokens == server.usage_totals["completion_tokens"] == 16 + 37
    assert calls("fact", "test-chat", tenant, "truncated") == 1
    assert calls("fact", "test-chat", tenant, "lengthened") == 1


async def test_an_answer_cut_again_at_the_larger_limit_is_truncated_output(
    server: OpenAIServer, tenant: str
) -> None:
    server.cut_at_max_tokens = True
    server.reply(LONG, LONG)
    client = LLMClient(make_settings(server, llm_max_tokens=16, llm_truncated_retry_max_tokens=20).llm)
    with pytest.raises(TruncatedOutput) as info:
        await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()
    assert info.value.max_tokens == 20
    assert len(chat_requests(server)) == 2
    assert calls("fact", "test-chat", tenant, "truncated") == 2


async def test_an_answer_at_the_limit_that_is_valid_is_kept(server: OpenAIServer, tenant: str) -> None:
    server.cut_at_max_tokens = True
    server.reply(LONG)
    client = LLMClient(make_settings(server, llm_max_tokens=37).llm)  # exactly its length: not cut
    result = await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()
    assert len(result.value.facts) == 12 and result.calls == 1


async def test_a_slow_answer_within_the_timeout_is_fine(server: OpenAIServer, tenant: str) -> None:
    # The timeout is per call: a local model's minutes-long answer only needs a timeout above it.
    server.chat_delay_s = 1.0
    server.reply(GOOD)
    client = LLMClient(make_settings(server, llm_timeout_s=3.0).llm, sleep=Sleeps())
    result = await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()
    assert result.value.facts == ["ran 10k", "with Anna"]
    assert len(chat_requests(server)) == 1
    assert calls("fact", "test-chat", tenant, "retry") == 0


# --- budget, concurrency, metrics -----------------------------------------------------------------


async def test_budget_exhausted_until_the_next_utc_day(server: OpenAIServer, tenant: str) -> None:
    now = [datetime(2024, 5, 8, 23, 59, tzinfo=UTC)]
    client = LLMClient(make_settings(server, llm_daily_token_budget=20).llm, clock=lambda: now[0])
    server.reply(GOOD, GOOD)
    await client.structured("fact", tenant, MESSAGES, Facts)  # 17 tokens: under the limit
    await client.structured("fact", tenant, MESSAGES, Facts)  # 34: over it
    assert client.budget.remaining(tenant, now[0]) == 0

    with pytest.raises(BudgetExhausted) as info:
        await client.structured("fact", tenant, MESSAGES, Facts)
    assert info.value.tenant == tenant
    assert info.value.resets_at == datetime(2024, 5, 9, tzinfo=UTC)
    assert len(chat_requests(server)) == 2  # refused before any request
    assert calls("fact", "test-chat", tenant, "budget") == 1
    # Other tenants are unaffected.
    await client.structured("fact", tenant + "-other", MESSAGES, Empty)

    now[0] += timedelta(minutes=2)  # 00:01 the next UTC day
    server.reply(GOOD)
    result = await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()
    assert result.value.facts == ["ran 10k", "with Anna"]
    assert client.budget.spent(tenant, now[0]) == 17


async def test_concurrency_limit_holds(server: OpenAIServer, tenant: str) -> None:
    server.chat_delay_s = 0.2
    client = LLMClient(make_settings(server, llm_concurrency=2).llm)
    results = await asyncio.gather(*(client.structured("fact", tenant, MESSAGES, Empty) for _ in range(6)))
    await client.aclose()
    assert len(results) == 6
    assert server.max_in_flight == 2
    assert metrics.LLM_IN_FLIGHT._value.get() == 0


async def test_prometheus_counters_equal_the_servers_usage(server: OpenAIServer, tenant: str) -> None:
    server.fail(Failure(429, retry_after_s=0.001), Failure(502))
    server.reply(GOOD, "oops", GOOD, '{"facts": []}')
    client = LLMClient(make_settings(server).llm)
    for _ in range(3):
        await client.structured("fact", tenant, MESSAGES, Facts)
    await client.aclose()

    assert tokens("fact", "test-chat", tenant, "prompt") == server.usage_totals["prompt_tokens"]
    assert tokens("fact", "test-chat", tenant, "completion") == server.usage_totals["completion_tokens"]
    answered = sum(calls("fact", "test-chat", tenant, o) for o in ("ok", "repaired", "invalid"))
    assert answered == server.usage_totals["calls"] == 4
    assert client.usage_totals()[("fact", "test-chat", tenant)] == server.usage_totals
    snap = metrics.snapshot()
    assert snap["memstream_llm_calls"][f"fact/test-chat/{tenant}/retry"] == 2
    prompt_tokens = snap["memstream_llm_tokens"][f"fact/test-chat/{tenant}/prompt"]
    assert prompt_tokens == server.usage_totals["prompt_tokens"]


# --- TokenBudget -----------------------------------------------------------------------------------

DAY = datetime(2024, 5, 8, tzinfo=UTC)


def test_budget_unlimited_and_limits() -> None:
    unlimited = TokenBudget(0)
    unlimited.spend("a", DAY, 10**9)
    unlimited.check("a", DAY)
    assert unlimited.remaining("a", DAY) is None
    assert unlimited.spent("a", DAY) == 10**9

    budget = TokenBudget(100)
    budget.spend("a", DAY, 99)
    budget.check("a", DAY)
    assert budget.remaining("a", DAY) == 1
    budget.spend("a", DAY, 5)
    with pytest.raises(BudgetExhausted) as info:
        budget.check("a", DAY + timedelta(hours=23))
    assert info.value.resets_at == DAY + timedelta(days=1)
    budget.check("b", DAY)
    budget.check("a", DAY + timedelta(days=1))


def test_budget_days_are_utc_days() -> None:
    budget = TokenBudget(10)
    plus_two = timezone(timedelta(hours=2))
    # 01:00 on 9 May at UTC+2 is still 8 May in UTC.
    budget.spend("a", datetime(2024, 5, 9, 1, 0, tzinfo=plus_two), 10)
    with pytest.raises(BudgetExhausted) as info:
        budget.check("a", DAY + timedelta(hours=12))
    assert info.value.resets_at == DAY + timedelta(days=1)
    with pytest.raises(ValueError, match="naive"):
        budget.check("a", datetime(2024, 5, 8))
    with pytest.raises(ValueError, match="negative"):
        budget.spend("a", DAY, -1)


def test_budget_forgets_old_days() -> None:
    budget = TokenBudget(10)
    for day in range(30):
        budget.spend("a", DAY + timedelta(days=day), 3)
    assert len(budget._days) == 2
    assert budget.spent("a", DAY) == 0  # forgotten
    assert budget.totals() == {"a": 90}
    budget.spend("a", DAY, 3)  # the clock went back past what is kept: totals only
    assert len(budget._days) == 2
    assert budget.totals() == {"a": 93}


@given(
    limit=st.integers(0, 50),
    spends=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 3 * 86_400), st.integers(0, 20)),
        max_size=40,
    ),
)
def test_budget_matches_a_simple_model(limit: int, spends: list[tuple[str, int, int]]) -> None:
    budget = TokenBudget(limit)
    per_day: dict[tuple[str, int], int] = {}
    # Time only moves forward here, so nothing the checks look at has been forgotten.
    for tenant, offset, n in sorted(spends, key=lambda s: s[1]):
        now = DAY + timedelta(seconds=offset)
        budget.spend(tenant, now, n)
        key = (tenant, offset // 86_400)
        per_day[key] = per_day.get(key, 0) + n
        for other in "abc":
            spent = per_day.get((other, offset // 86_400), 0)
            assert budget.spent(other, now) == spent
            assert budget.remaining(other, now) == (max(0, limit - spent) if limit else None)
            if limit and spent >= limit:
                with pytest.raises(BudgetExhausted):
                    budget.check(other, now)
            else:
                budget.check(other, now)
    totals: dict[str, int] = {}
    for tenant, _, n in spends:
        totals[tenant] = totals.get(tenant, 0) + n
    assert budget.totals() == totals


# --- the LLM writer's provenance: cited ids of the input only --------------------------------------------

INVENTED = "00000000-0000-4000-8000-000000000000"
SCOPE = Scope("acme", "ann", ZoneInfo("UTC"))
T = datetime(2024, 3, 4, 10, 0, tzinfo=UTC)
UNITS = [
    Source(str(uuid.uuid4()), T + timedelta(minutes=i), f"ann: {line}", (f"turn-{i}",))
    for i, line in enumerate(["I moved to Porto last week.", "I started a new job at a bakery.", "Hi!"])
]


def citing(extra: list[str], keep: int | None = None) -> Any:
    """``respond``, its citations cut to the first ``keep`` and ``extra`` (invented ids) added."""

    def answer(body: dict[str, Any]) -> str:
        out = json.loads(respond(body))

        def cite(ids: list[str]) -> list[str]:
            return [*ids[:keep], *extra]

        for item in [out, *out.get("episodes", []), *out.get("facts", [])]:
            for key in ("unit_ids", "source_ids", "topic_ids", "persona_ids"):
                if key in item:
                    item[key] = cite(item[key])
        return json.dumps(out)

    return answer


def memory(i: int, turns: tuple[str, ...]) -> Source:
    return Source(str(uuid.uuid4()), T, f"Summary {i}: ann: worked on {i}.", turns, start=T, end=T)


async def test_llm_writer_keeps_only_the_input_ids_it_cites(server: OpenAIServer, tenant: str) -> None:
    server.chat_responder = citing([INVENTED], keep=1)
    writer = LLMWriter(LLMClient(make_settings(server).llm), "test-chat")
    scope = Scope(tenant, "ann", ZoneInfo("UTC"))

    [episode] = await writer.episodes(scope, UNITS, None)
    assert episode.source_ids == (UNITS[0].id,)  # the invented id is dropped
    assert episode.covers_ids == tuple(u.id for u in UNITS)  # one episode: written from them all
    facts = await writer.facts(scope, episode, UNITS, [])
    assert facts and all(set(f.source_ids) <= {u.id for u in UNITS} for f in facts)

    children = [memory(0, ("t1", "t2")), memory(1, ("t3",))]
    session = await writer.summary(scope, SummaryRequest(MemoryKind.SESSION, T, T, UNITS, []))
    day = await writer.summary(scope, SummaryRequest(MemoryKind.DAY, T, T, children, []))
    profile = await writer.profile(scope, ProfileRequest(T, T, children[1:], children[0]))
    topic, persona = await writer.durative(scope, T, children)
    assert session.turn_ids == ("turn-0",)  # a cited unit: its turn
    assert day.turn_ids == ("t1", "t2")  # a cited memory: the turns its text carries
    assert profile.turn_ids == ("t1", "t2")  # the previous profile, tagged with its id, cited first
    assert topic.turn_ids == persona.turn_ids == ("t1", "t2")
    assert {session.sentence_turn_ids, day.sentence_turn_ids} == {()}  # unknown per sentence
    await writer.client.aclose()


async def test_llm_writer_states_no_turn_when_it_cites_only_invented_ids(
    server: OpenAIServer, tenant: str
) -> None:
    server.chat_responder = citing([INVENTED], keep=0)
    writer = LLMWriter(LLMClient(make_settings(server).llm), "test-chat")
    scope = Scope(tenant, "ann", ZoneInfo("UTC"))

    [episode] = await writer.episodes(scope, UNITS, None)
    assert episode.source_ids == ()
    assert episode.covers_ids == tuple(u.id for u in UNITS)  # it still covers what it was written from
    assert all(f.source_ids == () for f in await writer.facts(scope, episode, UNITS, []))
    assert (await writer.summary(scope, SummaryRequest(MemoryKind.SESSION, T, T, UNITS, []))).turn_ids == ()
    assert [w.turn_ids for w in await writer.durative(scope, T, [memory(0, ("t1",))])] == [(), ()]
    await writer.client.aclose()


async def test_llm_episodes_split_the_units_by_what_each_cites(server: OpenAIServer, tenant: str) -> None:
    def episode(ids: list[str]) -> dict[str, Any]:
        return {"text": "ann moved.", "start": "2024-03-04", "end": "2024-03-04", "unit_ids": ids}

    a, b, c = (u.id for u in UNITS)
    server.reply(json.dumps({"episodes": [episode([a, INVENTED]), episode([b, c])]}))
    writer = LLMWriter(LLMClient(make_settings(server).llm), "test-chat")
    drafts = await writer.episodes(Scope(tenant, "ann", ZoneInfo("UTC")), UNITS, None)
    assert [(d.source_ids, d.covers_ids) for d in drafts] == [((a,), (a,)), ((b, c), (b, c))]
    await writer.client.aclose()


# --- the consolidation step's dead letters -------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (InvalidOutput("facts", "not json", ValueError("no object")), "invalid_llm_output"),
        (TruncatedOutput("facts", '{"facts": ["a', ValueError("cut"), 16), "truncated_llm_output"),
    ],
)
def test_invalid_and_truncated_output_are_dead_lettered_with_their_own_reason(
    tmp_path: Path, exc: InvalidOutput, reason: str
) -> None:
    store = EdgeStore(tmp_path / "store")
    barrier = ReadYourWrites(Takeover(Settings(), MEMORY_UPDATES.name), OwnWrites())
    step = Consolidating(lambda _: store, barrier, lambda _: None, lambda: False, lambda: 100.0, 0.0)
    request = Incoming.read(b"t/u", b'{"request": 1}', CONSOLIDATION.name, 0, 7, timestamp=99.0)

    async def work(_: VectorStore) -> None:
        raise exc

    out = asyncio.run(step.attempt(step.job(request, CONSOLIDATION.name), "recurrence", work))
    store.close()
    assert isinstance(out, DeadLettered)
    [dead] = out.letters
    assert (dead.stage, dead.reason, dead.original, dead.offset) == (
        DeadLetterStage.CONSOLIDATE,
        reason,
        b'{"request": 1}',
        7,
    )

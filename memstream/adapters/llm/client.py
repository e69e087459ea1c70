"""OpenAI-compatible chat client for the consolidation stages: JSON output validated by a pydantic
model (with one repair call), retries with backoff, bounded concurrency, a per-tenant daily token
budget and Prometheus accounting.

Retries are ours, not the openai client's (it gets ``max_retries=0``): every attempt then shows in
the metrics, the semaphore is released while backing off, and the sleep is injectable for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Generic, TypeVar, cast

import openai
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, ValidationError

from memstream.adapters import metrics
from memstream.adapters.llm.budget import BudgetExhausted, LLMError, TokenBudget
from memstream.adapters.settings import Settings

T = TypeVar("T", bound=BaseModel)

_OVERRIDE_KEYS = frozenset({"base_url", "api_key", "model", "max_tokens", "timeout_s", "temperature"})


class LLMUnavailable(LLMError):
    """429/5xx/timeouts/connection errors persisted through every retry: defer and try later."""

    def __init__(self, stage: str, attempts: int, last_error: BaseException) -> None:
        super().__init__(f"LLM stage {stage!r} unavailable after {attempts} attempts: {last_error}")
        self.stage = stage
        self.attempts = attempts
        self.last_error = last_error


class InvalidOutput(LLMError):
    """The model's output did not match the response model, even after one repair call."""

    def __init__(self, stage: str, raw_text: str, error: Exception) -> None:
        super().__init__(f"LLM stage {stage!r} returned invalid output after a repair attempt: {error}")
        self.stage = stage
        self.raw_text = raw_text
        self.error = error


@dataclass(frozen=True)
class StageConfig:
    base_url: str
    api_key: str | None = field(repr=False)  # never in logs or tracebacks
    model: str
    max_tokens: int
    timeout_s: float
    temperature: float


def stage_config(settings: Settings, stage: str) -> StageConfig:
    """The settings for one stage: ``settings.llm_stages[stage]`` over the ``llm_*`` defaults."""
    overrides = settings.llm_stages.get(stage, {})
    unknown = set(overrides) - _OVERRIDE_KEYS
    if unknown:
        # A typo would otherwise silently fall back to the defaults.
        raise ValueError(
            f"MEMSTREAM_LLM_STAGES[{stage!r}] has unknown keys {sorted(unknown)};"
            f" allowed: {sorted(_OVERRIDE_KEYS)}"
        )
    base_url = overrides.get("base_url", settings.llm_base_url)
    if not base_url:
        raise ValueError(f"no LLM endpoint for stage {stage!r}: set MEMSTREAM_LLM_BASE_URL")
    api_key = settings.llm_api_key.get_secret_value() if settings.llm_api_key is not None else None
    return StageConfig(
        base_url=str(base_url),
        api_key=str(overrides["api_key"]) if "api_key" in overrides else api_key,
        model=str(overrides.get("model", settings.llm_model)),
        max_tokens=int(overrides.get("max_tokens", settings.llm_max_tokens)),
        timeout_s=float(overrides.get("timeout_s", settings.llm_timeout_s)),
        temperature=float(overrides.get("temperature", settings.llm_temperature)),
    )


@dataclass(frozen=True)
class ChatResult(Generic[T]):
    value: T
    prompt_tokens: int
    completion_tokens: int
    calls: int  # HTTP calls that returned a completion, the repair included
    model: str  # as the endpoint reported it


@dataclass(frozen=True)
class _Completion:
    content: str
    prompt_tokens: int
    completion_tokens: int
    model: str


def retry_after_s(headers: Mapping[str, str], now: datetime) -> float | None:
    """The wait the server asked for (``retry-after-ms``, ``Retry-After`` in seconds or as an HTTP
    date), the larger if both are given; None when it asked for nothing usable."""
    waits: list[float] = []
    ms = headers.get("retry-after-ms")
    if ms is not None:
        with contextlib.suppress(ValueError):
            waits.append(float(ms) / 1000)
    after = headers.get("retry-after")
    if after is not None:
        try:
            waits.append(float(after))
        except ValueError:
            with contextlib.suppress(TypeError, ValueError):
                waits.append((parsedate_to_datetime(after) - now).total_seconds())
    return max(0.0, *waits) if waits else None


def _repair_prompt(error: ValidationError, response_model: type[BaseModel]) -> str:
    problems = "; ".join(
        f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in error.errors(include_url=False)
    )
    return (
        f"Your previous answer is not valid: {problems}.\n"
        "Reply with ONLY the corrected JSON object (no prose, no code fences) matching this JSON Schema:\n"
        f"{json.dumps(response_model.model_json_schema())}"
    )


class LLMClient:
    """One per worker process. Safe for concurrent use from one event loop."""

    def __init__(
        self,
        settings: Settings,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: Callable[[], float] = random.random,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self.budget = TokenBudget(settings.llm_daily_token_budget)
        self._sleep = sleep
        self._rng = rng
        self._clock = clock
        self._stages: dict[str, StageConfig] = {}
        for stage in settings.llm_stages:
            self.config(stage)  # fail at start-up on a misconfigured stage, not at its first call
        # Both are bound to an event loop (httpx pools, semaphore waiters): made lazily in the
        # running loop and made afresh if the loop changes.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._clients: dict[tuple[str, str | None], openai.AsyncOpenAI] = {}
        self._usage: dict[tuple[str, str, str], dict[str, int]] = {}

    def config(self, stage: str) -> StageConfig:
        if stage not in self._stages:
            self._stages[stage] = stage_config(self.settings, stage)
        return self._stages[stage]

    def usage_totals(self) -> dict[tuple[str, str, str], dict[str, int]]:
        """{(stage, model, tenant): {"calls", "prompt_tokens", "completion_tokens"}} in this process."""
        return {key: dict(value) for key, value in self._usage.items()}

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    async def structured(
        self, stage: str, tenant: str, messages: list[dict[str, str]], response_model: type[T]
    ) -> ChatResult[T]:
        """Ask for a JSON object and validate it as ``response_model``; one repair call if invalid.

        Raises BudgetExhausted (before any HTTP call, or before a retry or the repair once the budget
        is spent), LLMUnavailable, InvalidOutput or LLMError.
        """
        cfg = self.config(stage)
        self._check_budget(stage, cfg, tenant)
        first = await self._complete(stage, cfg, tenant, messages)
        try:
            value = response_model.model_validate_json(first.content)
        except ValidationError as exc:
            self._count(stage, cfg, tenant, "invalid")
            repair = [
                *messages,
                {"role": "assistant", "content": first.content},
                {"role": "user", "content": _repair_prompt(exc, response_model)},
            ]
            second = await self._complete(stage, cfg, tenant, repair)
            try:
                value = response_model.model_validate_json(second.content)
            except ValidationError as exc2:
                self._count(stage, cfg, tenant, "invalid")
                raise InvalidOutput(stage, second.content, exc2) from exc2
            self._count(stage, cfg, tenant, "repaired")
            return ChatResult(
                value=value,
                prompt_tokens=first.prompt_tokens + second.prompt_tokens,
                completion_tokens=first.completion_tokens + second.completion_tokens,
                calls=2,
                model=second.model,
            )
        self._count(stage, cfg, tenant, "ok")
        return ChatResult(value, first.prompt_tokens, first.completion_tokens, 1, first.model)

    # -- one completion, with retries ---------------------------------------------------------

    async def _complete(
        self, stage: str, cfg: StageConfig, tenant: str, messages: list[dict[str, str]]
    ) -> _Completion:
        retries = self.settings.llm_max_retries
        last_error: Exception | None = None
        for attempt in range(retries + 1):
            wait: float | None = None
            try:
                response = await self._create(stage, cfg, tenant, messages)
            except openai.APIStatusError as exc:
                if exc.status_code != 429 and exc.status_code < 500:
                    self._count(stage, cfg, tenant, "failed")
                    raise LLMError(
                        f"LLM stage {stage!r} (model {cfg.model!r} at {cfg.base_url}) answered HTTP"
                        f" {exc.status_code}, which is not retried: {exc.message}"
                    ) from exc
                last_error, wait = exc, retry_after_s(exc.response.headers, self._clock())
            except openai.APIConnectionError as exc:  # APITimeoutError is one of these
                last_error = exc
            except openai.OpenAIError as exc:  # e.g. a response the client cannot read: not transient
                self._count(stage, cfg, tenant, "failed")
                raise LLMError(f"LLM stage {stage!r} (model {cfg.model!r} at {cfg.base_url}): {exc}") from exc
            else:
                return self._account(stage, cfg, tenant, response)
            if attempt == retries:
                break
            self._count(stage, cfg, tenant, "retry")
            # Full jitter spreads workers that failed together; the server's own ask wins if longer.
            backoff = self._rng() * min(
                self.settings.llm_backoff_max_s, self.settings.llm_backoff_base_s * 2**attempt
            )
            await self._sleep(max(backoff, wait or 0.0))
        self._count(stage, cfg, tenant, "failed")
        assert last_error is not None
        raise LLMUnavailable(stage, retries + 1, last_error)

    async def _create(
        self, stage: str, cfg: StageConfig, tenant: str, messages: list[dict[str, str]]
    ) -> ChatCompletion:
        client = self._client(cfg)
        async with self._slots():
            # Checked again with the slot held, right before each request (retries and the repair
            # included): a request only starts while the tenant is under budget, and at most
            # llm_concurrency are in flight, so a day's spend stays below budget + llm_concurrency
            # calls (each is billed on return, with no await between the slot's release and the bill).
            self._check_budget(stage, cfg, tenant)
            metrics.LLM_IN_FLIGHT.inc()
            started = time.perf_counter()
            try:
                return await client.chat.completions.create(
                    model=cfg.model,
                    messages=cast(Any, messages),
                    max_tokens=cfg.max_tokens,
                    temperature=cfg.temperature,
                    response_format={"type": "json_object"},
                    timeout=cfg.timeout_s,
                )
            finally:
                metrics.LLM_IN_FLIGHT.dec()
                metrics.LLM_SECONDS.labels(stage, cfg.model).observe(time.perf_counter() - started)

    def _account(self, stage: str, cfg: StageConfig, tenant: str, response: ChatCompletion) -> _Completion:
        """Bill a completed call from its ``usage`` (whether or not its content will parse)."""
        usage = response.usage
        prompt = usage.prompt_tokens if usage is not None else 0
        completion = usage.completion_tokens if usage is not None else 0
        self.budget.spend(tenant, self._clock(), prompt + completion)
        metrics.LLM_TOKENS.labels(stage, cfg.model, tenant, "prompt").inc(prompt)
        metrics.LLM_TOKENS.labels(stage, cfg.model, tenant, "completion").inc(completion)
        totals = self._usage.setdefault(
            (stage, cfg.model, tenant), {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        )
        totals["calls"] += 1
        totals["prompt_tokens"] += prompt
        totals["completion_tokens"] += completion
        # No choice or no content (a refusal) is invalid output like any other: the repair handles it.
        content = response.choices[0].message.content if response.choices else None
        return _Completion(content or "", prompt, completion, response.model or cfg.model)

    def _check_budget(self, stage: str, cfg: StageConfig, tenant: str) -> None:
        try:
            self.budget.check(tenant, self._clock())
        except BudgetExhausted:
            self._count(stage, cfg, tenant, "budget")
            raise

    def _count(self, stage: str, cfg: StageConfig, tenant: str, outcome: str) -> None:
        metrics.LLM_CALLS.labels(stage, cfg.model, tenant, outcome).inc()

    # -- loop-bound resources -------------------------------------------------------------------

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self._semaphore = asyncio.Semaphore(self.settings.llm_concurrency)
            self._clients = {}  # the old loop's connections cannot be used (nor closed) from this one

    def _slots(self) -> asyncio.Semaphore:
        self._bind_loop()
        assert self._semaphore is not None
        return self._semaphore

    def _client(self, cfg: StageConfig) -> openai.AsyncOpenAI:
        self._bind_loop()
        key = (cfg.base_url, cfg.api_key)
        if key not in self._clients:
            self._clients[key] = openai.AsyncOpenAI(
                base_url=cfg.base_url,
                # Local OpenAI-compatible servers often need no key; the client insists on one.
                api_key=cfg.api_key or os.environ.get("OPENAI_API_KEY") or "unset",
                timeout=cfg.timeout_s,
                max_retries=0,
            )
        return self._clients[key]

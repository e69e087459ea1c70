"""OpenAI-compatible chat client for the consolidation stages: JSON output validated by a pydantic
model (with one repair call), retries with backoff, bounded concurrency, a per-tenant daily token
budget and Prometheus accounting.

Real servers differ in how JSON can be asked for (llama.cpp answers 500 to a ``json_schema``
response format but takes ``json_object`` with a schema): with ``llm_response_format=auto`` the
client steps down json_schema -> json_object -> none on a rejection that names the response format,
and keeps the step per endpoint. Answers are read with :func:`json_object_text`, so fences and prose
around the object do not matter. An answer cut at the token limit is its own failure
(:class:`TruncatedOutput`): a repair call would be cut the same way.

Retries are ours, not the openai client's (it gets ``max_retries=0``): every attempt then shows in
the metrics, the semaphore is released while backing off, and the sleep is injectable for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
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
from memstream.adapters.llm.answer import json_object_text
from memstream.adapters.llm.budget import BudgetExhausted, LLMError, TokenBudget
from memstream.adapters.settings import LlmSettings

T = TypeVar("T", bound=BaseModel)

_OVERRIDE_KEYS = frozenset({"base_url", "api_key", "model", "max_tokens", "timeout_s", "temperature"})
# The order ``auto`` steps down in, from the most to the least the server is asked to enforce.
_FORMATS = ("json_schema", "json_object", "none")

log = logging.getLogger(__name__)


class LLMUnavailable(LLMError):
    """429/5xx/timeouts/connection errors persisted through every retry: defer and try later."""

    def __init__(self, stage: str, attempts: int, last_error: BaseException) -> None:
        super().__init__(f"LLM stage {stage!r} unavailable after {attempts} attempts: {last_error}")
        self.stage = stage
        self.attempts = attempts
        self.last_error = last_error


class InvalidOutput(LLMError):
    """The model's output did not match the response model, even after one repair call."""

    reason = "invalid_llm_output"  # the dead letter's reason

    def __init__(self, stage: str, raw_text: str, error: Exception) -> None:
        super().__init__(f"LLM stage {stage!r} returned invalid output after a repair attempt: {error}")
        self.stage = stage
        self.raw_text = raw_text
        self.error = error


class TruncatedOutput(InvalidOutput):
    """The answer stopped at the token limit (``finish_reason == "length"``) and is not valid: raise
    the stage's ``max_tokens`` or ``llm_truncated_retry_max_tokens``."""

    reason = "truncated_llm_output"

    def __init__(self, stage: str, raw_text: str, error: Exception, max_tokens: int) -> None:
        LLMError.__init__(
            self, f"LLM stage {stage!r} answer was cut at its limit of {max_tokens} tokens: {error}"
        )
        self.stage = stage
        self.raw_text = raw_text
        self.error = error
        self.max_tokens = max_tokens


@dataclass(frozen=True)
class StageConfig:
    base_url: str
    api_key: str | None = field(repr=False)  # never in logs or tracebacks
    model: str
    max_tokens: int
    timeout_s: float
    temperature: float


def stage_config(settings: LlmSettings, stage: str) -> StageConfig:
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
    finish_reason: str | None  # "length": cut at max_tokens


def _result(value: T, *completions: _Completion) -> ChatResult[T]:
    return ChatResult(
        value=value,
        prompt_tokens=sum(c.prompt_tokens for c in completions),
        completion_tokens=sum(c.completion_tokens for c in completions),
        calls=len(completions),
        model=completions[-1].model,
    )


def _parse(completion: _Completion, response_model: type[T]) -> T:
    return response_model.model_validate_json(json_object_text(completion.content))


def response_format(name: str, response_model: type[BaseModel]) -> dict[str, Any] | None:
    """The ``response_format`` body of format ``name`` (one of ``_FORMATS``); None to send none."""
    schema = response_model.model_json_schema()
    if name == "json_schema":
        # OpenAI's schema names allow [a-zA-Z0-9_-]{1,64}; not strict: strict mode constrains the schema.
        return {
            "type": "json_schema",
            "json_schema": {"name": response_model.__name__[:64], "schema": schema},
        }
    if name == "json_object":
        return {"type": "json_object", "schema": schema}  # the schema: llama.cpp constrains to it
    return None


def _rejects_format(exc: openai.APIStatusError, name: str) -> bool:
    """The server refused the request because of its response format (not overload, not the prompt)."""
    if exc.status_code == 429 or name == "none":
        return False
    said = f"{exc.message} {exc.body}".lower()
    return "response_format" in said or name in said


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
        settings: LlmSettings,
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
        self._formats: dict[tuple[str, str], str] = {}  # (base_url, model) -> the format auto settled on

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
        first = await self._complete(stage, cfg, tenant, messages, response_model)
        try:
            value = _parse(first, response_model)
        except ValidationError as exc:
            if first.finish_reason == "length":
                return await self._lengthened(stage, cfg, tenant, messages, response_model, first, exc)
            self._count(stage, cfg, tenant, "invalid")
            repair = [
                *messages,
                {"role": "assistant", "content": first.content},
                {"role": "user", "content": _repair_prompt(exc, response_model)},
            ]
            return await self._second_try(stage, cfg, tenant, repair, response_model, first, "repaired")
        self._count(stage, cfg, tenant, "ok")
        return _result(value, first)

    async def _lengthened(
        self,
        stage: str,
        cfg: StageConfig,
        tenant: str,
        messages: list[dict[str, str]],
        response_model: type[T],
        first: _Completion,
        error: ValidationError,
    ) -> ChatResult[T]:
        """After an answer cut at the token limit: one more try with the larger limit if one is set
        (a repair call would be cut the same way), else TruncatedOutput."""
        limit = self.settings.llm_truncated_retry_max_tokens
        if limit <= cfg.max_tokens:
            raise self._rejected(stage, cfg, tenant, first, error) from error
        self._count(stage, cfg, tenant, "truncated")
        longer = dataclasses.replace(cfg, max_tokens=limit)
        return await self._second_try(stage, longer, tenant, messages, response_model, first, "lengthened")

    async def _second_try(
        self,
        stage: str,
        cfg: StageConfig,
        tenant: str,
        messages: list[dict[str, str]],
        response_model: type[T],
        first: _Completion,
        outcome: str,
    ) -> ChatResult[T]:
        """The one call after an invalid ``first`` (a repair, or a larger limit): valid, counted as
        ``outcome``; invalid for good, the error to raise."""
        second = await self._complete(stage, cfg, tenant, messages, response_model)
        try:
            value = _parse(second, response_model)
        except ValidationError as exc:
            raise self._rejected(stage, cfg, tenant, second, exc) from exc
        self._count(stage, cfg, tenant, outcome)
        return _result(value, first, second)

    # -- one completion, with retries ---------------------------------------------------------

    async def _complete(
        self,
        stage: str,
        cfg: StageConfig,
        tenant: str,
        messages: list[dict[str, str]],
        response_model: type[BaseModel],
    ) -> _Completion:
        retries = self.settings.llm_max_retries
        last_error: Exception | None = None
        for attempt in range(retries + 1):
            wait: float | None = None
            try:
                response = await self._negotiated(stage, cfg, tenant, messages, response_model)
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

    def response_format_name(self, cfg: StageConfig) -> str:
        """The format sent to this stage's endpoint now: the setting, or where ``auto`` has got to."""
        configured = self.settings.llm_response_format
        if configured != "auto":
            return configured
        return self._formats.get((cfg.base_url, cfg.model), _FORMATS[0])

    async def _negotiated(
        self,
        stage: str,
        cfg: StageConfig,
        tenant: str,
        messages: list[dict[str, str]],
        response_model: type[BaseModel],
    ) -> ChatCompletion:
        """One request, stepping down the formats (``auto`` only) while the server rejects them."""
        while True:
            name = self.response_format_name(cfg)
            try:
                return await self._create(stage, cfg, tenant, messages, response_format(name, response_model))
            except openai.APIStatusError as exc:
                if self.settings.llm_response_format != "auto" or not _rejects_format(exc, name):
                    raise
                self._step_down(stage, cfg, tenant, name, exc.status_code)

    def _step_down(self, stage: str, cfg: StageConfig, tenant: str, name: str, status: int) -> None:
        self._count(stage, cfg, tenant, "format_rejected")
        key = (cfg.base_url, cfg.model)
        if self._formats.get(key, _FORMATS[0]) != name:
            return  # a concurrent call stepped down already (and logged it)
        following = _FORMATS[_FORMATS.index(name) + 1]
        self._formats[key] = following
        # The endpoint and the format only: the server's message may quote the prompt.
        log.warning(
            "LLM endpoint %s (model %s) rejected response_format %s with HTTP %d; sending %s from now on",
            cfg.base_url,
            cfg.model,
            name,
            status,
            following,
        )

    async def _create(
        self,
        stage: str,
        cfg: StageConfig,
        tenant: str,
        messages: list[dict[str, str]],
        fmt: dict[str, Any] | None,
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
                    response_format=cast(Any, openai.NOT_GIVEN if fmt is None else fmt),
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
        choice = response.choices[0] if response.choices else None
        content = choice.message.content if choice is not None else None
        finish = choice.finish_reason if choice is not None else None
        return _Completion(content or "", prompt, completion, response.model or cfg.model, finish)

    def _rejected(
        self, stage: str, cfg: StageConfig, tenant: str, completion: _Completion, error: ValidationError
    ) -> InvalidOutput:
        """Count an answer that is invalid for good; the error to raise: cut at the limit or not."""
        if completion.finish_reason == "length":
            self._count(stage, cfg, tenant, "truncated")
            return TruncatedOutput(stage, completion.content, error, cfg.max_tokens)
        self._count(stage, cfg, tenant, "invalid")
        return InvalidOutput(stage, completion.content, error)

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

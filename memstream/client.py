"""Python client of the memstream gateway: ``MemoryClient`` and ``AsyncMemoryClient``.

Typed by the gateway's own request and response models (``memstream.schemas.api``), so a client and the
server it talks to cannot disagree on a field. Every error is a ``MemstreamError`` subclass that
carries the server's reason; 429 and 503 are retried after the server's ``Retry-After``.

    from memstream.client import MemoryClient

    with MemoryClient("http://127.0.0.1:8080", api_key="...") as memory:
        memory.add("user-1", [{"role": "user", "content": "I moved to Porto in March."}])
        found = memory.recall("user-1", "Where do I live?", budget_tokens=500)
        print(found.context)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from memstream.schemas.api import (
    AnswerResponse,
    DeleteResult,
    MemoryDeleted,
    MemoryPage,
    RecallResponse,
    Timeline,
    TurnsAccepted,
    TurnStored,
)
from memstream.schemas.memory import Memory, MemoryUpdate
from memstream.schemas.tools import ToolResult

M = TypeVar("M", bound=BaseModel)
Message = Mapping[str, str]

DEFAULT_RETRIES = 3
MAX_RETRY_WAIT_S = 30.0


class MemstreamError(Exception):
    """A request the gateway refused or could not serve: ``status`` and the server's ``detail``."""

    def __init__(self, status: int, detail: Any, retry_after: float | None = None) -> None:
        super().__init__(f"{status}: {detail}")
        self.status, self.detail, self.retry_after = status, detail, retry_after


class AuthenticationError(MemstreamError):
    """401: no API key, or one the gateway does not know; 403: a turn names another tenant."""


class NotFound(MemstreamError):
    """404: no such turn, memory or tool."""


class InvalidRequest(MemstreamError):
    """400, 413 or 422: ``detail`` lists what is wrong (for 422, FastAPI's ``loc``/``msg``/``type``)."""


class RateLimited(MemstreamError):
    """429, still refused after the retries: the key's rate or its requests in flight."""


class Unavailable(MemstreamError):
    """503 after the retries, 408, or no answer: the gateway is overloaded, draining, or its
    broker or store is down. Safe to retry: turns are idempotent by turn id."""


class ServerError(MemstreamError):
    """Any other 5xx (502: the configured model did not answer)."""


_BY_STATUS: dict[int, type[MemstreamError]] = {
    400: InvalidRequest,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFound,
    408: Unavailable,
    413: InvalidRequest,
    422: InvalidRequest,
    429: RateLimited,
    503: Unavailable,
}
RETRIED = frozenset({429, 503})


@dataclass(frozen=True)
class Call:
    """One request, before any transport: what both clients send."""

    method: str
    path: str
    json: Any = None
    params: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)


def error_of(response: httpx.Response) -> MemstreamError:
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    retry_after = response.headers.get("Retry-After")
    kind = _BY_STATUS.get(
        response.status_code, ServerError if response.status_code >= 500 else MemstreamError
    )
    return kind(response.status_code, detail, float(retry_after) if retry_after else None)


def retry_wait(response: httpx.Response, attempt: int) -> float:
    """Seconds before the next try: the server's Retry-After, else exponential from 0.5 s; capped."""
    given = response.headers.get("Retry-After")
    try:
        wait = float(given) if given is not None else 0.5 * 2**attempt
    except ValueError:
        wait = 0.5 * 2**attempt
    return min(wait, MAX_RETRY_WAIT_S)


def _user(user_id: str) -> str:
    return quote(user_id, safe="")


def _add(
    user_id: str,
    messages: Sequence[Message],
    session_id: str | None,
    ts: datetime | None,
    metadata: Mapping[str, Any] | None,
    idempotency_key: str | None,
) -> Call:
    body: dict[str, Any] = {"user_id": user_id, "messages": [dict(m) for m in messages]}
    if session_id is not None:
        body["session_id"] = session_id
    if ts is not None:
        body["ts"] = ts.isoformat()
    if metadata:
        body["metadata"] = dict(metadata)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    return Call("POST", "/v1/turns", json=body, headers=headers)


def _recall_body(user_id: str, query: str, budget_tokens: int, now: datetime | None) -> dict[str, Any]:
    body: dict[str, Any] = {"user_id": user_id, "query": query, "budget_tokens": budget_tokens}
    if now is not None:
        body["now"] = now.isoformat()
    return body


def _timeline(user_id: str, start: datetime | None, end: datetime | None, min_level: int) -> Call:
    params: dict[str, Any] = {"min_level": min_level}
    if start is not None:
        params["start"] = start.isoformat()
    if end is not None:
        params["end"] = end.isoformat()
    return Call("GET", f"/v1/users/{_user(user_id)}/timeline", params=params)


def _memories(user_id: str, kind: str | None, level: int | None, limit: int, cursor: str | None) -> Call:
    params = {"kind": kind, "level": level, "limit": limit, "cursor": cursor}
    given = {k: v for k, v in params.items() if v is not None}
    return Call("GET", f"/v1/users/{_user(user_id)}/memories", params=given)


def _memory(method: str, memory_id: str) -> Call:
    return Call(method, f"/v1/memories/{quote(memory_id, safe='')}")


@dataclass(frozen=True)
class LiveEvent:
    """One server-sent event of a user's stream: ``memory`` (``update`` is the change), ``forgotten``
    (the user was deleted) or ``reset`` (updates were missed: read recall again). ``id`` is the
    position a reconnect resumes from (memory events only)."""

    kind: str
    id: str | None
    update: MemoryUpdate | None


@dataclass
class SseParser:
    """Server-sent events, line by line (comments and keep-alives skipped)."""

    kind: str = "message"
    id: str | None = None
    data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> LiveEvent | None:
        if line == "":
            event = None
            if self.data:
                body = "\n".join(self.data)
                update = _update(body) if self.kind == "memory" else None
                event = LiveEvent(self.kind, self.id, update)
            self.kind, self.id, self.data = "message", None, []
            return event
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self.kind = value
        elif name == "id":
            self.id = value
        elif name == "data":
            self.data.append(value)
        return None


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _update(data: str) -> MemoryUpdate:
    return MemoryUpdate.model_validate_json(data)


class MemoryClient:
    """Blocking client. ``retries`` applies to 429 and 503 (and a connection that fails)."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = DEFAULT_RETRIES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retries = retries
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call) -> httpx.Response:
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(
                    call.method, call.path, json=call.json, params=call.params, headers=call.headers
                )
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise Unavailable(0, f"no answer from the gateway: {type(exc).__name__}") from exc
                time.sleep(0.5 * 2**attempt)
                continue
            if response.status_code not in RETRIED or attempt == self.retries:
                break
            time.sleep(retry_wait(response, attempt))
        if response.is_error:
            raise error_of(response)
        return response

    def _get(self, call: Call, model: type[M]) -> M:
        return model.model_validate(self._send(call).json())

    def add(
        self,
        user_id: str,
        messages: Sequence[Message],
        *,
        session_id: str | None = None,
        ts: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> TurnsAccepted:
        """Store a user's messages (``{"role", "content", "name"?}``); a retry is stored once."""
        return self._get(_add(user_id, messages, session_id, ts, metadata, idempotency_key), TurnsAccepted)

    def add_turns(self, turns: Sequence[Mapping[str, Any]]) -> TurnsAccepted:
        """Store turns in the full shape (``session_id``, ``turn_id``, ``ts``, ``messages``), ≤ 500."""
        return self._get(Call("POST", "/v1/turns", json={"turns": list(turns)}), TurnsAccepted)

    def recall(
        self, user_id: str, query: str, *, budget_tokens: int = 1000, now: datetime | None = None
    ) -> RecallResponse:
        """Dated memories for ``query`` within ``budget_tokens``: ``.context`` for a prompt, ``.items``."""
        return self._get(
            Call("POST", "/v1/recall", json=_recall_body(user_id, query, budget_tokens, now)), RecallResponse
        )

    def answer(
        self, user_id: str, query: str, *, budget_tokens: int = 1000, now: datetime | None = None
    ) -> AnswerResponse:
        """Recall, then the gateway's configured model answers from the context."""
        return self._get(
            Call("POST", "/v1/answer", json=_recall_body(user_id, query, budget_tokens, now)), AnswerResponse
        )

    def timeline(
        self, user_id: str, *, start: datetime | None = None, end: datetime | None = None, min_level: int = 2
    ) -> Timeline:
        """The memory tree's nodes overlapping [start, end)."""
        return self._get(_timeline(user_id, start, end, min_level), Timeline)

    def tools(self) -> list[dict[str, Any]]:
        """The agent tools as OpenAI tool schemas."""
        tools: list[dict[str, Any]] = self._send(Call("GET", "/v1/tools")).json()
        return tools

    def tool(self, name: str, user_id: str, **arguments: Any) -> ToolResult:
        """Run one agent tool (``search_memory``, ``get_timeline``…) for ``user_id``."""
        call = Call(
            "POST", f"/v1/tools/{quote(name, safe='')}", json={"user_id": user_id, "arguments": arguments}
        )
        return self._get(call, ToolResult)

    def turn(self, user_id: str, turn_id: str) -> TurnStored:
        """The stored turn (NotFound until it is stored)."""
        return self._get(Call("GET", f"/v1/users/{_user(user_id)}/turns/{_user(turn_id)}"), TurnStored)

    def memories(
        self, user_id: str, *, kind: str | None = None, level: int | None = None, limit: int = 100
    ) -> Iterator[Memory]:
        """Every consolidated memory of the user (of ``kind`` or ``level``), fetched a page at a time."""
        cursor: str | None = None
        while True:
            page = self._get(_memories(user_id, kind, level, limit, cursor), MemoryPage)
            yield from page.memories
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def memory(self, memory_id: str) -> Memory:
        """One memory with its provenance."""
        return self._get(_memory("GET", memory_id), Memory)

    def delete_memory(self, memory_id: str) -> MemoryDeleted:
        """Delete one memory (applied by the worker right after); the user's turns stay."""
        return self._get(_memory("DELETE", memory_id), MemoryDeleted)

    def export(self, user_id: str) -> bytes:
        """Everything stored about the user as JSON Lines: turns (``memstream replay`` re-imports
        them), then ``{"memory": …}`` lines."""
        return self._send(Call("GET", f"/v1/users/{_user(user_id)}/export")).content

    def forget(self, user_id: str) -> DeleteResult:
        """Erase the user's turns and memories everywhere; a tombstone is recorded."""
        return self._get(Call("DELETE", f"/v1/users/{_user(user_id)}"), DeleteResult)

    def updates(self, user_id: str, last_event_id: str | None = None) -> Iterator[LiveEvent]:
        """Each change to the user's memory as it happens (server-sent events), until the caller
        stops. A dropped connection is resumed from the last event received, so none is missed."""
        path = f"/v1/users/{_user(user_id)}/updates"
        while True:
            headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
            try:
                with self._http.stream(
                    "GET", path, headers=headers, timeout=httpx.Timeout(30.0, read=None)
                ) as r:
                    if r.is_error:
                        r.read()
                        raise error_of(r)
                    parser = SseParser()
                    for line in r.iter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            last_event_id = event.id or last_event_id
                            yield event
            except httpx.TransportError:
                time.sleep(0.5)


class AsyncMemoryClient:
    """The same verbs as ``MemoryClient``, for asyncio."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = DEFAULT_RETRIES,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retries = retries
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call) -> httpx.Response:
        for attempt in range(self.retries + 1):
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.json, params=call.params, headers=call.headers
                )
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise Unavailable(0, f"no answer from the gateway: {type(exc).__name__}") from exc
                await asyncio.sleep(0.5 * 2**attempt)
                continue
            if response.status_code not in RETRIED or attempt == self.retries:
                break
            await asyncio.sleep(retry_wait(response, attempt))
        if response.is_error:
            raise error_of(response)
        return response

    async def _get(self, call: Call, model: type[M]) -> M:
        return model.model_validate((await self._send(call)).json())

    async def add(
        self,
        user_id: str,
        messages: Sequence[Message],
        *,
        session_id: str | None = None,
        ts: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> TurnsAccepted:
        return await self._get(
            _add(user_id, messages, session_id, ts, metadata, idempotency_key), TurnsAccepted
        )

    async def add_turns(self, turns: Sequence[Mapping[str, Any]]) -> TurnsAccepted:
        return await self._get(Call("POST", "/v1/turns", json={"turns": list(turns)}), TurnsAccepted)

    async def recall(
        self, user_id: str, query: str, *, budget_tokens: int = 1000, now: datetime | None = None
    ) -> RecallResponse:
        call = Call("POST", "/v1/recall", json=_recall_body(user_id, query, budget_tokens, now))
        return await self._get(call, RecallResponse)

    async def answer(
        self, user_id: str, query: str, *, budget_tokens: int = 1000, now: datetime | None = None
    ) -> AnswerResponse:
        call = Call("POST", "/v1/answer", json=_recall_body(user_id, query, budget_tokens, now))
        return await self._get(call, AnswerResponse)

    async def timeline(
        self, user_id: str, *, start: datetime | None = None, end: datetime | None = None, min_level: int = 2
    ) -> Timeline:
        return await self._get(_timeline(user_id, start, end, min_level), Timeline)

    async def tools(self) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = (await self._send(Call("GET", "/v1/tools"))).json()
        return tools

    async def tool(self, name: str, user_id: str, **arguments: Any) -> ToolResult:
        call = Call(
            "POST", f"/v1/tools/{quote(name, safe='')}", json={"user_id": user_id, "arguments": arguments}
        )
        return await self._get(call, ToolResult)

    async def turn(self, user_id: str, turn_id: str) -> TurnStored:
        return await self._get(Call("GET", f"/v1/users/{_user(user_id)}/turns/{_user(turn_id)}"), TurnStored)

    async def memories(
        self, user_id: str, *, kind: str | None = None, level: int | None = None, limit: int = 100
    ) -> AsyncIterator[Memory]:
        cursor: str | None = None
        while True:
            page = await self._get(_memories(user_id, kind, level, limit, cursor), MemoryPage)
            for memory in page.memories:
                yield memory
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def memory(self, memory_id: str) -> Memory:
        return await self._get(_memory("GET", memory_id), Memory)

    async def delete_memory(self, memory_id: str) -> MemoryDeleted:
        return await self._get(_memory("DELETE", memory_id), MemoryDeleted)

    async def export(self, user_id: str) -> bytes:
        return (await self._send(Call("GET", f"/v1/users/{_user(user_id)}/export"))).content

    async def forget(self, user_id: str) -> DeleteResult:
        return await self._get(Call("DELETE", f"/v1/users/{_user(user_id)}"), DeleteResult)

    async def updates(self, user_id: str, last_event_id: str | None = None) -> AsyncIterator[LiveEvent]:
        path = f"/v1/users/{_user(user_id)}/updates"
        while True:
            headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
            try:
                timeout = httpx.Timeout(30.0, read=None)
                async with self._http.stream("GET", path, headers=headers, timeout=timeout) as r:
                    if r.is_error:
                        await r.aread()
                        raise error_of(r)
                    parser = SseParser()
                    async for line in r.aiter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            last_event_id = event.id or last_event_id
                            yield event
            except httpx.TransportError:
                await asyncio.sleep(0.5)

"""The query gateway (FastAPI). It keeps no state of its own: turns go to the ``turns`` topic,
reads go to the stores (the Qdrant server, or with the embedded store the worker that owns the
user's partition: a recall goes to it whole, in one request), live updates come from
``memory.updates``. Run any number of replicas.

Every request is scoped to the tenant of its API key; a user is ``tenant/user_id``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any
from uuid import UUID

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, KafkaTimeoutError
from fastapi import Body as BodyParam
from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, Response, Security
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstream.adapters import metrics
from memstream.adapters.embedders import make_embedder
from memstream.adapters.kafka import by_key, client_kwargs, partition_for
from memstream.adapters.llm import LLMClient, LLMError
from memstream.adapters.settings import Settings
from memstream.adapters.store.shards import Shards
from memstream.apps.gateway.auth import (
    Bucket,
    digest,
    evict_full,
    parse_keys,
    presented_key,
    take,
    tenant_for,
)
from memstream.apps.gateway.dashboard import dashboard_router
from memstream.apps.gateway.drain import DRAIN_SIGNAL, Drain
from memstream.apps.gateway.forget import forget_user
from memstream.apps.gateway.stores import gateway_shards
from memstream.apps.gateway.updates import Event, UpdateHub, position
from memstream.core.chat import turns_from_messages
from memstream.core.embedder import Embedder
from memstream.core.export import export_lines
from memstream.core.memories import KIND_FIELD, MEMORIES, memory_from_payload
from memstream.core.prompts import ANSWER
from memstream.core.recall import rank
from memstream.core.recall.engine import Recalled
from memstream.core.recall.tools import run_tool
from memstream.core.recall.wire import Ask
from memstream.core.store import Filter, Range, StoreUnavailable, VectorStore, scroll_all
from memstream.core.units import UNITS, USER_FIELD, content_hash, unit_from_payload
from memstream.core.validation import Limits, Rejection, limits_from, validate
from memstream.embedded_store.remote_recall import recall_at
from memstream.schemas.api import (
    AnswerResponse,
    DeleteResult,
    MemoryDeleted,
    MemoryPage,
    MessagesIn,
    Problem,
    RecallItem,
    RecallRequest,
    RecallResponse,
    Timeline,
    TimelineNode,
    ToolCall,
    TurnBatch,
    TurnIn,
    TurnsAccepted,
    TurnsIn,
    TurnStored,
)
from memstream.schemas.events import (
    DEFAULT_TENANT,
    Identifier,
    IsoAwareDatetime,
    Turn,
    partition_key,
    unit_id_for,
)
from memstream.schemas.memory import Memory, MemoryKind, MemoryOp, MemoryUpdate
from memstream.schemas.tools import TOOLS, ToolResult, openai_tools
from memstream.schemas.topics import MEMORY_UPDATES, TOMBSTONES, TURNS

log = logging.getLogger("memstream.gateway")
HEARTBEAT_S = 15.0
# POST /v1/turns waits this long for the broker's acks, then answers 503 with Retry-After (the
# producer's own request timeout, 10 s, would hold the client that long when the broker is gone).
SEND_TIMEOUT_S = 5.0
# Never shed: probes and scrapes must answer while the gateway is saturated.
UNBOUNDED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
SHED_RETRY_AFTER_S = 1
# A 422 lists this many errors at most, each input cut to this many characters.
MAX_ERRORS = 20
ECHO_CHARS = 100


def admit(path: str, in_flight: int, limit: int) -> bool:
    """Whether a request for ``path`` may start while ``in_flight`` others are in progress."""
    return path in UNBOUNDED_PATHS or in_flight < limit


# A response the gate sends itself: status, body, headers.
Refusal = tuple[int, bytes, list[tuple[bytes, bytes]]]


def _refusal(status: int, detail: str, *extra: tuple[bytes, bytes]) -> Refusal:
    body = orjson.dumps({"detail": detail})
    return (
        status,
        body,
        [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra],
    )


RETRY = (b"retry-after", str(SHED_RETRY_AFTER_S).encode())
SHED = _refusal(503, "overloaded: too many requests in flight", RETRY)
KEY_BUSY = _refusal(429, "too many requests in flight for this API key", RETRY)
UNAUTHORIZED = _refusal(401, "missing or unknown API key", (b"www-authenticate", b"Bearer"))
INTERNAL = _refusal(500, "internal error")
# Where admission leaves the caller's tenant for the ``tenant`` dependency (the request's state).
TENANT_STATE = "memstream.tenant"


@dataclass(frozen=True)
class Admission:
    """What the gateway admits: the key table (None: no auth, one tenant), the rate limit per key,
    the slots in flight in all and per key, and the time a body may take."""

    keys: dict[bytes, str] | None
    rate_per_s: float
    burst: int
    limit: int
    per_key: int
    body_timeout_s: float

    @classmethod
    def of(cls, settings: Settings) -> Admission:
        keys = parse_keys(settings.api_keys.get_secret_value()) if settings.api_keys else None
        return cls(
            keys,
            settings.rate_limit_per_s,
            settings.rate_limit_burst,
            settings.gateway_max_in_flight,
            settings.gateway_max_in_flight_per_key,
            settings.gateway_body_timeout_s,
        )


def needs_tenant(route: BaseRoute) -> bool:
    """Whether ``route`` depends, at any depth, on the caller's tenant (so needs a valid key)."""
    dependant = getattr(route, "dependant", None)
    stack = [dependant] if dependant is not None else []
    while stack:
        d = stack.pop()
        if d.call is tenant:
            return True
        stack.extend(d.dependencies)
    return False


class Gate:
    """Admission, load shedding and request metrics as one pure ASGI middleware (no per-request
    task group, stream or Request object, so a refusal costs a few dict lookups and two sends: the
    refusals must stay cheap or a saturated event loop answers them late). In the event loop (no
    lock), before any slot or body is taken: a route that needs a tenant gets 401 without a known
    key and 429 past its key's rate limit or its ``per_key`` requests in flight; past ``limit``
    requests in flight, 503 with Retry-After; probes and scrapes never wait. A slot is held until
    the response starts (an SSE stream holds none), and the body must arrive within
    ``body_timeout_s`` (408), so slow senders cannot hold slots for long, nor more than ``per_key``.
    An unhandled error is answered 500 and logged as its type and route only: the traceback of an
    error raised while handling a request can carry the request's text."""

    def __init__(self, app: ASGIApp, admission: Admission) -> None:
        self.app = app
        self.admission = admission
        self.in_flight = 0
        self.by_key: dict[bytes, int] = {}
        self.buckets: dict[bytes, Bucket] = {}
        self.swept_at = time.monotonic()
        # Whether a route needs a tenant, by id(route): routes are not hashable, and live as long as the app.
        self.protected: dict[int, bool] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        route = _route_of(scope)
        name = getattr(route, "path", "unmatched")
        if scope["path"] in UNBOUNDED_PATHS:
            await self._run(scope, receive, send, name, t0, None)
            return
        owner, refusal = self._admit(scope, route, name)
        if refusal is not None:
            status, body, headers = refusal
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            _count(name, status, t0)
            return
        self.in_flight += 1
        metrics.GATEWAY_IN_FLIGHT.set(self.in_flight)
        if owner is not None:
            self.by_key[owner] = self.by_key.get(owner, 0) + 1
        deadline = asyncio.get_running_loop().time() + self.admission.body_timeout_s
        await self._run(
            scope, _body_by(receive, deadline, self.admission.body_timeout_s), send, name, t0, owner
        )

    def _admit(self, scope: Scope, route: BaseRoute | None, name: str) -> tuple[bytes | None, Refusal | None]:
        """The key whose slot the request takes (None where its route needs no tenant), or the
        refusal; the caller's tenant goes to the request's state."""
        owner = None
        if route is not None and self._protected(route):
            found, owner = self._identify(scope)
            if found is None:
                return None, UNAUTHORIZED
            wait = self._take(owner)
            if wait > 0:
                metrics.RATE_LIMITED.inc()
                return None, _refusal(
                    429, "rate limit exceeded", (b"retry-after", str(max(1, round(wait))).encode())
                )
            if self.by_key.get(owner, 0) >= self.admission.per_key:
                metrics.GATEWAY_SHED.labels(name, "key").inc()
                return None, KEY_BUSY
            scope.setdefault("state", {})[TENANT_STATE] = found
        if not admit(scope["path"], self.in_flight, self.admission.limit):
            metrics.GATEWAY_SHED.labels(name, "gateway").inc()
            return None, SHED
        return owner, None

    def _protected(self, route: BaseRoute) -> bool:
        known = self.protected.get(id(route))
        if known is None:
            known = self.protected[id(route)] = needs_tenant(route)
        return known

    def _identify(self, scope: Scope) -> tuple[str | None, bytes]:
        """The caller's tenant (None: no known key) and what its rate limit and slots are counted
        by: its key, or without keys its address (a key then means nothing, and a client could
        name a new one per request)."""
        if self.admission.keys is None:
            client = scope.get("client")
            return DEFAULT_TENANT, (client[0] if client else "").encode()
        presented = presented_key(scope["headers"])
        return (tenant_for(self.admission.keys, presented) if presented else None), digest(presented or "")

    def _take(self, owner: bytes) -> float:
        """A token of ``owner``'s bucket: 0.0, or the seconds until one is back. Buckets that have
        refilled are dropped every refill period, so the table stays as small as the callers of
        the last few seconds."""
        a, now = self.admission, time.monotonic()
        if now - self.swept_at >= a.burst / a.rate_per_s:
            self.buckets, self.swept_at = evict_full(self.buckets, now, a.rate_per_s, a.burst), now
        self.buckets[owner], wait = take(self.buckets.get(owner), now, a.rate_per_s, a.burst)
        return wait

    async def _run(
        self, scope: Scope, receive: Receive, send: Send, name: str, t0: float, owner: bytes | None
    ) -> None:
        holding = scope["path"] not in UNBOUNDED_PATHS
        responded = False

        def release() -> None:
            nonlocal holding
            holding = False
            self.in_flight -= 1
            metrics.GATEWAY_IN_FLIGHT.set(self.in_flight)
            if owner is not None:
                left = self.by_key.pop(owner) - 1
                if left:
                    self.by_key[owner] = left

        async def started(message: Message) -> None:
            nonlocal responded
            if message["type"] == "http.response.start" and not responded:
                responded = True
                if holding:
                    release()
                _count(getattr(scope.get("route"), "path", name), message["status"], t0)
            await send(message)

        try:
            await self.app(scope, receive, started)
        except Exception as exc:  # the last line of defence: answer, and log no request data
            log.error("unhandled %s on %s %s", type(exc).__name__, scope["method"], name)
            if not responded:
                status, body, headers = INTERNAL
                await started({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
        finally:
            if holding:
                release()


def _route_of(scope: Scope) -> BaseRoute | None:
    router = scope["app"].router
    return next((r for r in router.routes if r.matches(scope)[0] == Match.FULL), None)


def _count(name: str, status: int, t0: float) -> None:
    metrics.GATEWAY_REQUESTS.labels(name, str(status)).inc()
    metrics.GATEWAY_SECONDS.labels(name).observe(time.perf_counter() - t0)  # to the response's start


def _body_by(receive: Receive, deadline: float, timeout_s: float) -> Receive:
    """``receive`` with the whole body due by ``deadline`` (loop time): 408 after it. Once the body
    is in, later calls (a stream waiting for the client to leave) wait as long as they need."""
    body_done = False

    async def timed() -> Message:
        nonlocal body_done
        if body_done:
            return await receive()
        try:
            async with asyncio.timeout_at(deadline):
                message = await receive()
        except TimeoutError:
            # FastAPI re-raises an HTTPException from reading the body, and answers it.
            raise HTTPException(
                408, f"request body not received within {timeout_s:g} s", headers={"Connection": "close"}
            ) from None
        body_done = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    return timed


@dataclass
class Services:
    settings: Settings
    embedder: Embedder
    shards: Shards
    producer: AIOKafkaProducer
    hub: UpdateHub
    llm: LLMClient | None
    drain: Drain = field(default_factory=Drain)

    def store(self, user_key: str) -> VectorStore:
        return self.shards.get(partition_for(user_key.encode(), self.settings.topic_partitions))


@asynccontextmanager
async def services(settings: Settings) -> AsyncIterator[Services]:
    if settings.api_keys is None:
        log.warning("MEMSTREAM_API_KEYS unset: no authentication, every request is tenant %r", DEFAULT_TENANT)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per store call otherwise
    embedder = await asyncio.to_thread(make_embedder, settings)
    shards = gateway_shards(settings, embedder.dim)
    producer = AIOKafkaProducer(
        **client_kwargs(settings), partitioner=by_key, acks="all", request_timeout_ms=10_000
    )
    await producer.start()
    hub = UpdateHub(settings)
    await hub.start()
    llm = LLMClient(settings) if settings.llm_base_url else None
    try:
        yield Services(settings, embedder, shards, producer, hub, llm)
    finally:
        await hub.stop()
        await producer.stop()
        if llm:
            await llm.aclose()
        shards.close()


def svc_of(request: Request) -> Services:
    svc: Services = request.app.state.svc
    return svc


# Declared so that the OpenAPI document names both ways to send a key (the docs page's Authorize
# button, generated clients); the key itself is read and checked by the Gate, before any route.
BEARER = HTTPBearer(auto_error=False, description="`Authorization: Bearer <key>`")
API_KEY = APIKeyHeader(name="X-API-Key", auto_error=False, description="the key in `X-API-Key`")


async def tenant(
    request: Request,
    _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
    _key: Annotated[str | None, Security(API_KEY)],
) -> str:
    """The caller's tenant, as the ``Gate`` found it from the API key before admitting the request
    (and its rate limit); none there is a 401 (a route the gate did not see as needing one)."""
    found: str | None = request.scope.get("state", {}).get(TENANT_STATE)
    if found is None:
        raise HTTPException(401, "missing or unknown API key", headers={"WWW-Authenticate": "Bearer"})
    return found


Tenant = Annotated[str, Depends(tenant)]
# The ids POST /v1/turns accepts, and no others: every accepted user can be reached and forgotten.
UserId = Annotated[Identifier, PathParam()]
TurnId = Annotated[Identifier, PathParam()]
Svc = Annotated[Services, Depends(svc_of)]


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with services(settings) as svc:
            app.state.svc = svc
            # Only a gateway in the main thread can take the signal (not one served from a thread).
            with suppress(RuntimeError):
                asyncio.get_running_loop().add_signal_handler(DRAIN_SIGNAL, svc.drain.start)
            yield

    app = FastAPIOffline(
        title="memstream gateway",
        version="1",
        description="Long-term memory for agents: ingest turns, recall time-aware hierarchical memory, "
        "answer with dates, agent tools, live updates. Authenticate with `Authorization: Bearer <key>`.",
        lifespan=lifespan,
        max_body_size=settings.max_request_bytes,  # 413, chunked bodies included
        responses={
            400: {"model": Problem, "description": "the body is not JSON"},
            401: {"model": Problem, "description": "missing or unknown API key"},
            403: {"model": Problem, "description": "a turn names another tenant than the key's"},
            408: {
                "model": Problem,
                "description": "the body did not arrive within MEMSTREAM_GATEWAY_BODY_TIMEOUT_S",
            },
            413: {"model": Problem, "description": "request body too large"},
            429: {
                "model": Problem,
                "description": "rate limit, or the key's requests in flight; retry after Retry-After seconds",
            },
            503: {
                "model": Problem,
                "description": "overloaded, draining, broker or store unavailable; retry after Retry-After",
            },
        },
    )

    app.add_middleware(Gate, admission=Admission.of(settings))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """FastAPI's 422 echoes each error's whole input (1 MB in, 3 MB out) and fails to write one
        holding a lone surrogate: the errors' location, message and type, and a short input."""
        errors = [_brief(e) for e in exc.errors()[:MAX_ERRORS]]
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        """Starlette's 405 lists the methods of the first route of the path only: every route's."""
        if exc.status_code != 405:
            return await http_exception_handler(request, exc)
        routes = request.app.router.routes
        methods = {
            m for r in routes if r.matches(request.scope)[0] != Match.NONE for m in getattr(r, "methods", ())
        }
        return JSONResponse(
            {"detail": exc.detail}, status_code=405, headers={"Allow": ", ".join(sorted(methods))}
        )

    @app.exception_handler(StoreUnavailable)
    async def store_down(request: Request, exc: StoreUnavailable) -> JSONResponse:
        log.warning("store unavailable: %s", exc)
        return JSONResponse({"detail": "store unavailable"}, status_code=503, headers={"Retry-After": "2"})

    @app.exception_handler(KafkaError)
    async def broker_down(request: Request, exc: KafkaError) -> JSONResponse:
        log.warning("broker unavailable: %r", exc)
        return JSONResponse({"detail": "broker unavailable"}, status_code=503, headers={"Retry-After": "2"})

    limits = limits_from(settings.max_turn_bytes, settings.min_ts, settings.max_future_skew_s, settings.zone)

    @app.post("/v1/turns", status_code=202, response_model=TurnsAccepted, tags=["ingest"])
    async def post_turns(
        body: Annotated[TurnsIn, BodyParam()],
        tenant: Tenant,
        svc: Svc,
        idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
    ) -> TurnsAccepted:
        """Log one turn, a batch, or a user's chat messages to the ``turns`` topic (acks=all).
        Idempotent by ``turn_id``: a turn posted again is stored once. A messages body's turn ids
        are derived from ``Idempotency-Key`` or from its content, so its retry is stored once too.
        Turns are checked as the ingest processor checks them (time zone, time range, size): one
        invalid turn refuses the whole request with 422. No LLM on this path."""
        if isinstance(body, MessagesIn):
            try:
                made = turns_from_messages(body, tenant, datetime.now(UTC), idempotency_key)
            except ValidationError as exc:  # what a turn allows and the messages shape cannot say
                errors = [
                    {"loc": ["body", "messages", *e["loc"]], "msg": e["msg"], "type": e["type"]}
                    for e in exc.errors()[:MAX_ERRORS]
                ]
                raise HTTPException(422, errors) from exc
            incoming: list[TurnIn] = [TurnIn.model_validate(t.model_dump()) for t in made]
        else:
            incoming = body.turns if isinstance(body, TurnBatch) else [body]
        turns = [_owned_turn(t, i, tenant, limits) for i, t in enumerate(incoming)]
        topic = settings.topic(TURNS.name)
        # A retried messages body has new default times, so its turns differ from the stored
        # ones: those already stored are answered with their stored hash rather than sent again.
        stored = await run_in_threadpool(_stored_hashes, svc, turns) if isinstance(body, MessagesIn) else {}

        async def send_all() -> None:
            sends = [
                await svc.producer.send(topic, t.to_bytes(), key=t.key.encode(), timestamp_ms=None)
                for t in turns
                if t.turn_id not in stored
            ]
            await asyncio.gather(*sends)

        try:
            # Bounded: with the broker gone, send() and the acks would wait out the producer's
            # request timeout. A turn may still be delivered after the 503; a retry is then
            # recognised by its turn_id and stored once.
            with svc.drain.admit():
                await asyncio.wait_for(send_all(), SEND_TIMEOUT_S)
        except TimeoutError as exc:
            raise KafkaTimeoutError(f"no acks within {SEND_TIMEOUT_S}s") from exc
        metrics.TURNS_ACCEPTED.labels(tenant).inc(len(turns))
        return TurnsAccepted(
            accepted=len(turns),
            turn_ids=[t.turn_id for t in turns],
            content_hashes=[stored.get(t.turn_id) or content_hash(t) for t in turns],
        )

    @app.post("/v1/recall", response_model=RecallResponse, tags=["recall"])
    def post_recall(body: RecallRequest, tenant: Tenant, svc: Svc) -> RecallResponse:
        """Time-aware hierarchical recall: dated items within ``budget_tokens`` and a rendered context."""
        return _recall(svc, tenant, body)

    @app.post("/v1/answer", response_model=AnswerResponse, tags=["recall"])
    async def post_answer(body: RecallRequest, tenant: Tenant, svc: Svc) -> AnswerResponse:
        """Recall, then ask the configured chat model to answer from the dated context. Without a
        model the context is returned and ``note`` says that no model answered."""
        recalled = await run_in_threadpool(_recall, svc, tenant, body)
        if svc.llm is None:
            note = "no LLM configured (MEMSTREAM_LLM_BASE_URL): no model answered; the context is returned"
            return AnswerResponse(answer=None, answered_by=None, note=note, recall=recalled)
        now = body.now or datetime.now(UTC)
        messages = ANSWER.messages(
            now=now.astimezone(settings.zone).strftime("%A %d %B %Y %H:%M %Z"),
            question=body.query,
            context=recalled.context or "(no memories)",
        )
        try:
            result = await svc.llm.structured("answer", tenant, messages, ANSWER.response)
        except LLMError as exc:
            raise HTTPException(502, f"the model did not answer: {type(exc).__name__}") from exc
        return AnswerResponse(answer=result.value.answer, answered_by=result.model, recall=recalled)

    @app.get("/v1/tools", tags=["tools"])
    def get_tools() -> list[dict[str, Any]]:
        """The agent tools as OpenAI tool schemas; call one with ``POST /v1/tools/{name}``."""
        return openai_tools()

    @app.post(
        "/v1/tools/{name}",
        response_model=ToolResult,
        tags=["tools"],
        responses={404: {"model": Problem, "description": "no such tool"}},
    )
    def post_tool(
        name: Annotated[str, PathParam(json_schema_extra={"enum": sorted(TOOLS)})],
        body: ToolCall,
        tenant: Tenant,
        svc: Svc,
    ) -> ToolResult:
        """Run one agent tool for ``user_id`` with the arguments its schema describes."""
        if name not in TOOLS:
            raise HTTPException(404, f"unknown tool {name!r}; GET /v1/tools lists them")
        key = partition_key(tenant, body.user_id)
        try:
            return run_tool(name, body.arguments, svc.store(key), svc.embedder, key)
        except ValidationError as exc:
            errors = [
                {"loc": ["body", "arguments", *e["loc"]], "msg": e["msg"], "type": e["type"]}
                for e in exc.errors()
            ]
            raise HTTPException(422, errors) from exc

    @app.get("/v1/users/{user_id}/timeline", response_model=Timeline, tags=["recall"])
    def get_timeline(
        user_id: UserId,
        tenant: Tenant,
        svc: Svc,
        start: Annotated[IsoAwareDatetime | None, Query()] = None,
        end: Annotated[IsoAwareDatetime | None, Query()] = None,
        min_level: Annotated[int, Query(ge=1, le=5)] = 2,
    ) -> Timeline:
        """The memory tree (session, day, week, profile, topic, persona nodes) overlapping
        [start, end), by start time."""
        key = partition_key(tenant, user_id)
        ranges = {"start_epoch": Range(lt=end.timestamp())} if end else {}
        hits = scroll_all(svc.store(key), MEMORIES, Filter(equals={USER_FIELD: key}, ranges=ranges))
        nodes = []
        for hit in hits:
            m = memory_from_payload(hit.payload)
            if m.level < min_level or (start and (m.end or m.start) < start):
                continue
            nodes.append(
                TimelineNode(
                    id=m.memory_id,
                    kind=m.kind.value,
                    level=m.level,
                    text=m.text,
                    start=m.start,
                    end=m.end,
                    parent_id=m.parent_id,
                    children=list(m.children),
                )
            )
        nodes.sort(key=lambda n: (n.start or datetime.min.replace(tzinfo=UTC), -n.level, n.id))
        return Timeline(user_id=user_id, nodes=nodes)

    @app.get(
        "/v1/users/{user_id}/export",
        tags=["users"],
        response_class=StreamingResponse,
        responses={200: {"content": {"application/x-ndjson": {}}}},
    )
    def export_user(user_id: UserId, tenant: Tenant, svc: Svc) -> StreamingResponse:
        """Everything stored about the user as JSON Lines: their turns by dialogue time (the shape
        ``memstream replay --format jsonl`` re-imports), then ``{"memory": …}`` lines, their
        consolidated memories with provenance."""
        key = partition_key(tenant, user_id)
        store, mine = svc.store(key), Filter(equals={USER_FIELD: key})
        units = [unit_from_payload(h.payload) for h in scroll_all(store, UNITS, mine)]
        memories = [memory_from_payload(h.payload) for h in scroll_all(store, MEMORIES, mine)]
        return StreamingResponse(export_lines(units, memories), media_type="application/x-ndjson")

    @app.get(
        "/v1/users/{user_id}/turns/{turn_id}",
        response_model=TurnStored,
        tags=["ingest"],
        responses={404: {"model": Problem, "description": "no turn stored under this turn_id"}},
    )
    def get_turn(user_id: UserId, turn_id: TurnId, tenant: Tenant, svc: Svc) -> TurnStored:
        """The turn stored under ``turn_id``: its content hash tells whether the turn you posted is
        the one stored (the hash POST /v1/turns answered) or was refused as a reused turn_id. 404
        until the pipeline has stored it, and for a turn dead-lettered for any other reason."""
        key = partition_key(tenant, user_id)
        hits = svc.store(key).retrieve(UNITS, [unit_id_for(tenant, user_id, turn_id)])
        if not hits:
            raise HTTPException(404, "no turn stored under this turn_id (not yet, refused, or forgotten)")
        unit = unit_from_payload(hits[0].payload)
        return TurnStored(
            turn_id=unit.turn_id, session_id=unit.session_id, ts=unit.ts, content_hash=unit.content_hash
        )

    @app.get(
        "/v1/users/{user_id}/updates",
        tags=["recall"],
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def get_updates(
        user_id: UserId,
        tenant: Tenant,
        svc: Svc,
        last_event_id: Annotated[str | None, Header(max_length=64)] = None,
    ) -> StreamingResponse:
        """Server-sent events: a ``memory`` event per change to this user's memory (a MemoryUpdate as
        JSON, its ``id`` its position), and ``forgotten`` when the user is deleted. Reconnecting with
        ``Last-Event-ID`` first sends the user's changes after it (the last 10,000 records of the
        user's partition, as long as the topic keeps them; further back a ``reset`` event says to
        read recall again), then the live ones, none twice."""
        key = partition_key(tenant, user_id)
        queue = svc.hub.subscribe(key)  # before the replay, so nothing falls between the two
        after = position(last_event_id)
        missed: list[Event] = []
        partition = end = -1
        try:
            if after is not None:
                missed, partition, end = await svc.hub.missed(key, after)
        except BaseException:
            svc.hub.unsubscribe(key, queue)
            raise

        async def events() -> AsyncIterator[bytes]:
            try:
                yield b": connected\n\n"
                for earlier in missed:
                    yield earlier.encode()
                while True:
                    try:
                        event = await asyncio.wait_for(queue.get(), HEARTBEAT_S)
                    except TimeoutError:
                        yield b": keep-alive\n\n"
                        continue
                    if event is None:  # fell too far behind
                        return
                    if event.partition == partition and event.offset is not None and event.offset < end:
                        continue  # sent by the replay
                    yield event.encode()
            finally:
                svc.hub.unsubscribe(key, queue)

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    @app.get("/v1/users/{user_id}/memories", response_model=MemoryPage, tags=["memories"])
    def list_memories(
        user_id: UserId,
        tenant: Tenant,
        svc: Svc,
        kind: Annotated[MemoryKind | None, Query()] = None,
        level: Annotated[int | None, Query(ge=1, le=5)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        cursor: Annotated[UUID | None, Query(description="next_cursor of the page before")] = None,
    ) -> MemoryPage:
        """The user's consolidated memories (not the raw turns), a page at a time, optionally of
        one kind or level; superseded facts included (``current`` false)."""
        key = partition_key(tenant, user_id)
        equals = {USER_FIELD: key} | ({KIND_FIELD: kind.value} if kind else {})
        hits, after = svc.store(key).scroll(
            MEMORIES, Filter(equals=equals), limit, None if cursor is None else str(cursor)
        )
        found = (memory_from_payload(h.payload) for h in hits)
        return MemoryPage(memories=[m for m in found if level in (None, m.level)], next_cursor=after)

    @app.get(
        "/v1/memories/{memory_id}",
        response_model=Memory,
        tags=["memories"],
        responses={404: {"model": Problem, "description": "no memory of the key's tenant has this id"}},
    )
    def get_memory(memory_id: UUID, tenant: Tenant, svc: Svc) -> Memory:
        """One memory with its provenance: the turns its text carries (``source_turn_ids``), every
        turn beneath it (``covers_turn_ids``), and its place in the tree (``parent_id``, ``children``)."""
        return _memory_of(svc, tenant, memory_id)

    @app.delete(
        "/v1/memories/{memory_id}",
        status_code=202,
        response_model=MemoryDeleted,
        tags=["memories"],
        responses={404: {"model": Problem, "description": "no memory of the key's tenant has this id"}},
    )
    async def delete_memory(memory_id: UUID, tenant: Tenant, svc: Svc) -> MemoryDeleted:
        """Delete one memory: a ``delete`` record on ``memory.updates`` (acks=all), which the
        worker applies as it applies consolidation's own, in order; the user's turns stay."""
        memory = await run_in_threadpool(_memory_of, svc, tenant, memory_id)
        update = MemoryUpdate(
            op=MemoryOp.DELETE, memory_id=memory.memory_id, tenant=memory.tenant, user_id=memory.user_id
        )
        topic = settings.topic(MEMORY_UPDATES.name)
        try:
            with svc.drain.admit():
                send = svc.producer.send_and_wait(topic, update.to_bytes(), key=memory.key.encode())
                await asyncio.wait_for(send, SEND_TIMEOUT_S)
        except TimeoutError as exc:
            raise KafkaTimeoutError(f"no acks within {SEND_TIMEOUT_S}s") from exc
        return MemoryDeleted(memory_id=memory.memory_id, detail="deleted once the worker applies it")

    @app.delete("/v1/users/{user_id}", response_model=DeleteResult, tags=["users"])
    async def delete_user(user_id: UserId, tenant: Tenant, svc: Svc) -> DeleteResult:
        """Forget a user: every unit and memory of theirs, in every collection; a tombstone is
        recorded on the ``tombstones`` topic. Returns what was deleted."""
        store = svc.store(partition_key(tenant, user_id))
        stone = await forget_user(store, svc.producer, settings.topic(TOMBSTONES.name), tenant, user_id)
        metrics.USERS_DELETED.labels(tenant).inc()
        return DeleteResult(
            tenant=tenant,
            user_id=user_id,
            units=stone.units,
            memories=stone.memories,
            tombstone=stone.deleted_at,
        )

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict[str, bool]:
        """The process is up."""
        return {"ok": True}

    @app.get("/readyz", tags=["ops"], responses={503: {"model": Problem}})
    async def readyz(svc: Svc) -> JSONResponse:
        """Ready when the broker answers, live updates are flowing, and every partition's store
        answers. Draining (``memstream up`` stopping): 503, with the turn requests in progress."""
        if svc.drain.draining:
            return JSONResponse(svc.drain.report(), status_code=503)
        problems = []
        try:
            await asyncio.wait_for(svc.producer.client.fetch_all_metadata(), 2.0)
        except (KafkaError, TimeoutError) as exc:
            problems.append(f"broker: {type(exc).__name__}")
        if not svc.hub.ready.is_set():
            problems.append("memory.updates consumer not started")
        probe = Filter(equals={USER_FIELD: "readyz/probe"})
        for p in range(settings.topic_partitions):
            try:
                await asyncio.wait_for(run_in_threadpool(svc.shards.get(p).count, UNITS, probe), 3.0)
            except (StoreUnavailable, TimeoutError) as exc:
                problems.append(f"store of partition {p}: {type(exc).__name__}")
        if problems:
            return JSONResponse({"ready": False, "problems": problems}, status_code=503)
        return JSONResponse({"ready": True})

    @app.get("/metrics", tags=["ops"], response_class=Response)
    def get_metrics() -> Response:
        """Prometheus metrics of this replica."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    app.include_router(dashboard_router(settings))

    return app


def _printable(value: object) -> object:
    """A string capped at ECHO_CHARS and writable as UTF-8 (a lone surrogate escaped); other
    values as they are."""
    if not isinstance(value, str):
        return value
    return value[:ECHO_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")


def _brief(error: Any) -> dict[str, Any]:
    """One validation error as the 422 shows it: its input only when a scalar, capped."""
    out = {
        "loc": [_printable(p) for p in error["loc"]],
        "msg": _printable(error["msg"]),
        "type": error["type"],
    }
    if isinstance(error.get("input"), str | int | float | bool):
        out["input"] = _printable(error["input"])
    return out


def _memory_of(svc: Services, tenant: str, memory_id: UUID) -> Memory:
    """The tenant's memory of this id, looked for in every partition's store (an id names no
    user, so no partition); 404 when none of the tenant's has it."""
    for p in range(svc.settings.topic_partitions):
        for hit in svc.shards.get(p).retrieve(MEMORIES, [str(memory_id)]):
            memory = memory_from_payload(hit.payload)
            if memory.tenant == tenant:
                return memory
    raise HTTPException(404, "no memory with this id")


def _stored_hashes(svc: Services, turns: Sequence[Turn]) -> dict[str, str]:
    """turn_id → content hash of those of one user's ``turns`` already stored."""
    if not turns:
        return {}
    first = turns[0]
    ids = [unit_id_for(first.tenant, first.user_id, t.turn_id) for t in turns]
    hits = svc.store(first.key).retrieve(UNITS, ids)
    return {u.turn_id: u.content_hash for u in (unit_from_payload(h.payload) for h in hits)}


def _owned_turn(turn: TurnIn, index: int, tenant: str, limits: Limits) -> Turn:
    """The turn under the key's tenant, checked by the ingest processor's own rules (so the
    gateway refuses what would be dead-lettered, and says why)."""
    if turn.tenant not in (None, tenant):
        raise HTTPException(403, f"turn {turn.turn_id!r} names another tenant than the API key's")
    checked = validate(
        Turn.model_validate({**turn.model_dump(), "tenant": tenant}).to_bytes(), limits, datetime.now(UTC)
    )
    if isinstance(checked, Rejection):
        # The shape of FastAPI's own validation errors, as the OpenAPI document declares for 422.
        error = {"loc": ["body", "turns", index], "msg": checked.detail, "type": checked.reason}
        raise HTTPException(422, [error])
    return checked


def recall_item(item: rank.Item, score: float) -> RecallItem:
    """One recalled item as the API gives it: its event times are when what it tells happened (a unit's
    semantic time, not the time it was said, which is ``dialogue_time``)."""
    event_start, event_end = rank.event_interval(item)
    return RecallItem(
        id=item.id,
        kind=item.kind,
        level=item.level,
        text=item.text,
        dialogue_time=item.recorded_at,
        event_start=event_start,
        event_end=event_end,
        score=round(score, 6),
        current=item.current,
        source_turn_ids=list(item.source_turn_ids),
        covers_turn_ids=list(item.covers_turn_ids),
    )


def _recall(svc: Services, tenant: str, body: RecallRequest) -> RecallResponse:
    """The recall, run by the worker that holds the user's shard with the embedded store (one request,
    the query embedded here), else here on the Qdrant server."""
    key = partition_key(tenant, body.user_id)
    ask = Ask(
        user_key=key,
        query=body.query,
        now=body.now or datetime.now(UTC),
        budget_tokens=body.budget_tokens,
        zone=svc.settings.default_timezone,
        levels=None if body.levels is None else tuple(body.levels),
    )
    result: Recalled = recall_at(svc.store(key), svc.embedder, ask)
    items = [recall_item(item, score) for item, score in result.items]
    return RecallResponse(
        items=items,
        context=result.context,
        tokens=rank.tokens(result.context),
        complexity=result.complexity,
        time_intent=[(iv.start, iv.end) for iv in result.intent.intervals],
    )

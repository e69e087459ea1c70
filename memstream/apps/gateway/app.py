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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, KafkaTimeoutError
from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstream.adapters import metrics
from memstream.adapters.embedders import make_embedder
from memstream.adapters.kafka import by_key, client_kwargs, partition_for
from memstream.adapters.llm import LLMClient, LLMError
from memstream.adapters.remote_recall import recall_at
from memstream.adapters.settings import Settings
from memstream.adapters.store.shards import Shards
from memstream.apps.gateway.auth import Bucket, digest, parse_keys, take, tenant_for
from memstream.apps.gateway.drain import DRAIN_SIGNAL, Drain
from memstream.apps.gateway.stores import gateway_shards
from memstream.apps.gateway.updates import UpdateHub
from memstream.core.embedder import Embedder
from memstream.core.forgetting import erase_user
from memstream.core.memories import MEMORIES, memory_from_payload
from memstream.core.prompts import ANSWER
from memstream.core.recall import rank
from memstream.core.recall.engine import Recalled
from memstream.core.recall.tools import run_tool
from memstream.core.recall.wire import Ask
from memstream.core.store import Filter, Range, StoreUnavailable, VectorStore, scroll_all
from memstream.core.unit_views import UNIT_VIEWS
from memstream.core.units import UNITS, USER_FIELD
from memstream.core.validation import Limits, Rejection, limits_from, validate
from schemas.api import (
    AnswerResponse,
    DeleteResult,
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
)
from schemas.events import DEFAULT_TENANT, IsoAwareDatetime, Tombstone, Turn, partition_key
from schemas.tools import TOOLS, ToolResult, openai_tools
from schemas.topics import TOMBSTONES, TURNS

log = logging.getLogger("memstream.gateway")
HEARTBEAT_S = 15.0
# POST /v1/turns waits this long for the broker's acks, then answers 503 with Retry-After (the
# producer's own request timeout, 10 s, would hold the client that long when the broker is gone).
SEND_TIMEOUT_S = 5.0
# Never shed: probes and scrapes must answer while the gateway is saturated.
UNBOUNDED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
SHED_RETRY_AFTER_S = 1


def admit(path: str, in_flight: int, limit: int) -> bool:
    """Whether a request for ``path`` may start while ``in_flight`` others are in progress."""
    return path in UNBOUNDED_PATHS or in_flight < limit


SHED_BODY = b'{"detail":"overloaded: too many requests in flight"}'
SHED_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(SHED_BODY)).encode()),
    (b"retry-after", str(SHED_RETRY_AFTER_S).encode()),
]


class Gate:
    """Load shedding and request metrics as one pure ASGI middleware (no per-request task group,
    stream or Request object, so a refusal costs a few dict lookups and two sends: the refusals
    must stay cheap or a saturated event loop answers them late). Past ``limit`` requests in
    progress, 503 with Retry-After at once, before auth, the rate limit or any work (in the event
    loop: no lock); probes and scrapes never. The slot is held until the response starts (an SSE
    stream holds none)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        if not admit(scope["path"], self.in_flight, self.limit):
            router = scope["app"].router
            route = next((r for r in router.routes if r.matches(scope)[0] == Match.FULL), None)
            name = getattr(route, "path", "unmatched")
            metrics.GATEWAY_SHED.labels(name).inc()
            await send({"type": "http.response.start", "status": 503, "headers": SHED_HEADERS})
            await send({"type": "http.response.body", "body": SHED_BODY})
            metrics.GATEWAY_REQUESTS.labels(name, "503").inc()
            metrics.GATEWAY_SECONDS.labels(name).observe(time.perf_counter() - t0)
            return
        self.in_flight += 1
        holding = True

        def done(status: int) -> None:
            nonlocal holding
            holding = False
            self.in_flight -= 1
            name = getattr(scope.get("route"), "path", "unmatched")
            metrics.GATEWAY_REQUESTS.labels(name, str(status)).inc()
            metrics.GATEWAY_SECONDS.labels(name).observe(time.perf_counter() - t0)

        async def started(message: Message) -> None:
            if holding and message["type"] == "http.response.start":
                done(message["status"])  # latency to the response's start, as for a stream
            await send(message)

        try:
            await self.app(scope, receive, started)
        finally:
            if holding:  # no response started: an exception, answered 500 further out
                done(500)


@dataclass
class Services:
    settings: Settings
    embedder: Embedder
    shards: Shards
    producer: AIOKafkaProducer
    hub: UpdateHub
    llm: LLMClient | None
    keys: dict[bytes, str] | None
    buckets: dict[bytes, Bucket] = field(default_factory=dict)
    drain: Drain = field(default_factory=Drain)

    def store(self, user_key: str) -> VectorStore:
        return self.shards.get(partition_for(user_key.encode(), self.settings.topic_partitions))


@asynccontextmanager
async def services(settings: Settings) -> AsyncIterator[Services]:
    keys = parse_keys(settings.api_keys.get_secret_value()) if settings.api_keys else None
    if keys is None:
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
        yield Services(settings, embedder, shards, producer, hub, llm, keys)
    finally:
        await hub.stop()
        await producer.stop()
        if llm:
            await llm.aclose()
        shards.close()


def svc_of(request: Request) -> Services:
    svc: Services = request.app.state.svc
    return svc


async def tenant(request: Request) -> str:
    """The caller's tenant from its API key, after its rate limit (in the event loop, so the
    buckets need no lock)."""
    svc = svc_of(request)
    header = request.headers.get("authorization", "")
    presented = header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key")
    found = DEFAULT_TENANT if svc.keys is None else tenant_for(svc.keys, presented) if presented else None
    if found is None:
        raise HTTPException(401, "missing or unknown API key", headers={"WWW-Authenticate": "Bearer"})
    bucket_key = digest(presented or "")
    bucket, wait = take(
        svc.buckets.get(bucket_key),
        time.monotonic(),
        svc.settings.rate_limit_per_s,
        svc.settings.rate_limit_burst,
    )
    svc.buckets[bucket_key] = bucket
    if wait > 0:
        metrics.RATE_LIMITED.inc()
        raise HTTPException(429, "rate limit exceeded", headers={"Retry-After": str(max(1, round(wait)))})
    return found


Tenant = Annotated[str, Depends(tenant)]
UserId = Annotated[str, PathParam(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")]
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

    app = FastAPI(
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
            413: {"model": Problem, "description": "request body too large"},
            429: {"model": Problem, "description": "rate limit; retry after Retry-After seconds"},
            503: {
                "model": Problem,
                "description": "overloaded, draining, broker or store unavailable; retry after Retry-After",
            },
        },
    )

    app.add_middleware(Gate, limit=settings.gateway_max_in_flight)

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
    async def post_turns(body: TurnIn | TurnBatch, tenant: Tenant, svc: Svc) -> TurnsAccepted:
        """Log one turn or a batch to the ``turns`` topic (acks=all). Idempotent by ``turn_id``:
        a turn posted again is stored once. Turns are checked as the ingest processor checks them
        (time zone, time range, size): one invalid turn refuses the whole batch with 422. No LLM
        on this path."""
        incoming = body.turns if isinstance(body, TurnBatch) else [body]
        turns = [_owned_turn(t, i, tenant, limits) for i, t in enumerate(incoming)]
        topic = settings.topic(TURNS.name)

        async def send_all() -> None:
            sends = [
                await svc.producer.send(topic, t.to_bytes(), key=t.key.encode(), timestamp_ms=None)
                for t in turns
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
        return TurnsAccepted(accepted=len(turns), turn_ids=[t.turn_id for t in turns])

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
    def post_tool(name: str, body: ToolCall, tenant: Tenant, svc: Svc) -> ToolResult:
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
        "/v1/users/{user_id}/updates",
        tags=["recall"],
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def get_updates(user_id: UserId, tenant: Tenant, svc: Svc) -> StreamingResponse:
        """Server-sent events: one ``memory`` event per change to this user's memory
        (a MemoryUpdate as JSON), from the moment of connecting."""
        key = partition_key(tenant, user_id)
        queue = svc.hub.subscribe(key)

        async def events() -> AsyncIterator[bytes]:
            try:
                yield b": connected\n\n"
                while True:
                    try:
                        update = await asyncio.wait_for(queue.get(), HEARTBEAT_S)
                    except TimeoutError:
                        yield b": keep-alive\n\n"
                        continue
                    if update is None:  # fell too far behind
                        return
                    yield b"event: memory\nid: " + update.memory_id.encode() + b"\ndata: " + update.to_bytes()
                    yield b"\n\n"
            finally:
                svc.hub.unsubscribe(key, queue)

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    @app.delete("/v1/users/{user_id}", response_model=DeleteResult, tags=["users"])
    async def delete_user(user_id: UserId, tenant: Tenant, svc: Svc) -> DeleteResult:
        """Forget a user: every unit and memory of theirs, in every collection; a tombstone is
        recorded on the ``tombstones`` topic. Returns what was deleted."""
        key = partition_key(tenant, user_id)
        units, memories, _ = await run_in_threadpool(
            erase_user, svc.store(key), key, [UNITS, MEMORIES, UNIT_VIEWS]
        )
        stone = Tombstone(
            tenant=tenant, user_id=user_id, deleted_at=datetime.now(UTC), units=units, memories=memories
        )
        await svc.producer.send_and_wait(settings.topic(TOMBSTONES.name), stone.to_bytes(), key=key.encode())
        metrics.USERS_DELETED.labels(tenant).inc()
        return DeleteResult(
            tenant=tenant, user_id=user_id, units=units, memories=memories, tombstone=stone.deleted_at
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

    return app


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
    items = [
        RecallItem(
            id=item.id,
            kind=item.kind,
            level=item.level,
            text=item.text,
            dialogue_time=item.recorded_at,
            event_start=item.start,
            event_end=item.end,
            score=round(score, 6),
            current=item.current,
            source_turn_ids=list(item.source_turn_ids),
            covers_turn_ids=list(item.covers_turn_ids),
        )
        for item, score in result.items
    ]
    return RecallResponse(
        items=items,
        context=result.context,
        tokens=rank.tokens(result.context),
        complexity=result.complexity,
        time_intent=[(iv.start, iv.end) for iv in result.intent.intervals],
    )

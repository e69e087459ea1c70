"""Recall: the time-aware recall, an answer from it, the memory tree, and live updates."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from memstream.adapters.llm import LLMError
from memstream.apps.gateway.deps import Services, Svc, Tenant, UserId
from memstream.apps.gateway.updates import Event, position
from memstream.core.memories import MEMORIES, memory_from_payload
from memstream.core.prompts import ANSWER
from memstream.core.recall import rank
from memstream.core.recall.engine import Ask, Recalled, item_of
from memstream.core.store import Filter, Range, scroll_all
from memstream.core.units import USER_FIELD
from memstream.embedded_store.remote_recall import recall_at
from memstream.schemas.api import (
    AnswerResponse,
    RecallItem,
    RecallRequest,
    RecallResponse,
    Timeline,
    TimelineNode,
)
from memstream.schemas.events import IsoAwareDatetime, partition_key

router = APIRouter(tags=["recall"])
HEARTBEAT_S = 15.0


@router.post("/v1/recall", response_model=RecallResponse)
def post_recall(body: RecallRequest, tenant: Tenant, svc: Svc) -> RecallResponse:
    """Time-aware hierarchical recall: dated items within ``budget_tokens`` and a rendered context."""
    return _recall_response(svc, tenant, body)


@router.post("/v1/answer", response_model=AnswerResponse)
async def post_answer(body: RecallRequest, tenant: Tenant, svc: Svc) -> AnswerResponse:
    """Recall, then ask the configured chat model to answer from the dated context. Without a
    model the context is returned and ``note`` says that no model answered."""
    recalled = await run_in_threadpool(_recall_response, svc, tenant, body)
    if svc.llm is None:
        note = "no LLM configured (MEMSTREAM_LLM_BASE_URL): no model answered; the context is returned"
        return AnswerResponse(answer=None, answered_by=None, note=note, recall=recalled)
    now = body.now or datetime.now(UTC)
    messages = ANSWER.messages(
        now=now.astimezone(svc.settings.windows.zone).strftime("%A %d %B %Y %H:%M %Z"),
        question=body.query,
        context=recalled.context or "(no memories)",
    )
    try:
        result = await svc.llm.structured("answer", tenant, messages, ANSWER.response)
    except LLMError as exc:
        raise HTTPException(502, f"the model did not answer: {type(exc).__name__}") from exc
    return AnswerResponse(answer=result.value.answer, answered_by=result.model, recall=recalled)


@router.get("/v1/users/{user_id}/timeline", response_model=Timeline)
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
    # A node is the memory as recall sees it (the one conversion, ``engine.item_of``), less the fields
    # only recall reads.
    items = (item_of(memory_from_payload(hit.payload), 0.0) for hit in hits)
    nodes = [
        TimelineNode.model_validate(i, from_attributes=True)
        for i in items
        if i.level >= min_level and not (start and (i.end or i.start) < start)
    ]
    nodes.sort(key=lambda n: (n.start or datetime.min.replace(tzinfo=UTC), -n.level, n.id))
    return Timeline(user_id=user_id, nodes=nodes)


@router.get(
    "/v1/users/{user_id}/updates",
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

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


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


def _recall_response(svc: Services, tenant: str, body: RecallRequest) -> RecallResponse:
    """The recall (``engine.recall``), run by the worker that holds the user's shard with the embedded
    store (one request, the query embedded here), else here on the Qdrant server."""
    key = partition_key(tenant, body.user_id)
    ask = Ask(
        user_key=key,
        query=body.query,
        now=body.now or datetime.now(UTC),
        budget_tokens=body.budget_tokens,
        zone=svc.settings.windows.default_timezone,
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

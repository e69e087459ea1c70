"""A user's consolidated memories: a page of them, one with its provenance, and its deletion."""

from __future__ import annotations

import asyncio
from typing import Annotated
from uuid import UUID

from aiokafka.errors import KafkaTimeoutError
from fastapi import APIRouter, HTTPException, Query
from fastapi.concurrency import run_in_threadpool

from memstream.apps.gateway.deps import SEND_TIMEOUT_S, Services, Svc, Tenant, UserId
from memstream.core.memories import KIND_FIELD, MEMORIES, memory_from_payload
from memstream.core.store import Filter
from memstream.core.units import USER_FIELD
from memstream.schemas.api import MemoryDeleted, MemoryPage, Problem
from memstream.schemas.events import partition_key
from memstream.schemas.memory import Memory, MemoryKind, MemoryOp, MemoryUpdate
from memstream.schemas.topics import MEMORY_UPDATES

router = APIRouter(tags=["memories"])


@router.get("/v1/users/{user_id}/memories", response_model=MemoryPage)
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


@router.get(
    "/v1/memories/{memory_id}",
    response_model=Memory,
    responses={404: {"model": Problem, "description": "no memory of the key's tenant has this id"}},
)
def get_memory(memory_id: UUID, tenant: Tenant, svc: Svc) -> Memory:
    """One memory with its provenance: the turns its text carries (``source_turn_ids``), every
    turn beneath it (``covers_turn_ids``), and its place in the tree (``parent_id``, ``children``)."""
    return _memory_of(svc, tenant, memory_id)


@router.delete(
    "/v1/memories/{memory_id}",
    status_code=202,
    response_model=MemoryDeleted,
    responses={404: {"model": Problem, "description": "no memory of the key's tenant has this id"}},
)
async def delete_memory(memory_id: UUID, tenant: Tenant, svc: Svc) -> MemoryDeleted:
    """Delete one memory: a ``delete`` record on ``memory.updates`` (acks=all), which the
    worker applies as it applies consolidation's own, in order; the user's turns stay."""
    memory = await run_in_threadpool(_memory_of, svc, tenant, memory_id)
    update = MemoryUpdate(
        op=MemoryOp.DELETE, memory_id=memory.memory_id, tenant=memory.tenant, user_id=memory.user_id
    )
    topic = svc.settings.kafka.topic(MEMORY_UPDATES.name)
    try:
        with svc.drain.admit():
            send = svc.producer.send_and_wait(topic, update.to_bytes(), key=memory.key.encode())
            await asyncio.wait_for(send, SEND_TIMEOUT_S)
    except TimeoutError as exc:
        raise KafkaTimeoutError(f"no acks within {SEND_TIMEOUT_S}s") from exc
    return MemoryDeleted(memory_id=memory.memory_id, detail="deleted once the worker applies it")


def _memory_of(svc: Services, tenant: str, memory_id: UUID) -> Memory:
    """The tenant's memory of this id, looked for in every partition's store (an id names no
    user, so no partition); 404 when none of the tenant's has it."""
    for p in range(svc.settings.kafka.topic_partitions):
        for hit in svc.shards.get(p).retrieve(MEMORIES, [str(memory_id)]):
            memory = memory_from_payload(hit.payload)
            if memory.tenant == tenant:
                return memory
    raise HTTPException(404, "no memory with this id")

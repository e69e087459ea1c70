"""A user as a whole: everything stored about them, and forgetting them."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from memstream.adapters import metrics
from memstream.apps.gateway.deps import Svc, Tenant, UserId
from memstream.apps.gateway.forget import forget_user
from memstream.core.export import export_lines
from memstream.core.memories import MEMORIES, memory_from_payload
from memstream.core.store import Filter, scroll_all
from memstream.core.units import UNITS, USER_FIELD, unit_from_payload
from memstream.schemas.api import DeleteResult
from memstream.schemas.events import partition_key
from memstream.schemas.topics import TOMBSTONES

router = APIRouter(tags=["users"])


@router.get(
    "/v1/users/{user_id}/export",
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


@router.delete("/v1/users/{user_id}", response_model=DeleteResult)
async def delete_user(user_id: UserId, tenant: Tenant, svc: Svc) -> DeleteResult:
    """Forget a user: every unit and memory of theirs, in every collection; a tombstone is
    recorded on the ``tombstones`` topic. Returns what was deleted."""
    store = svc.store(partition_key(tenant, user_id))
    stone = await forget_user(store, svc.producer, svc.settings.kafka.topic(TOMBSTONES.name), tenant, user_id)
    metrics.USERS_DELETED.labels(tenant).inc()
    return DeleteResult(
        tenant=tenant,
        user_id=user_id,
        units=stone.units,
        memories=stone.memories,
        tombstone=stone.deleted_at,
    )

"""Ingest: turns into the ``turns`` topic, and what was stored of one."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated

from aiokafka.errors import KafkaTimeoutError
from fastapi import APIRouter, Header, HTTPException
from fastapi import Body as BodyParam
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError

from memstream.adapters import metrics
from memstream.apps.gateway.deps import SEND_TIMEOUT_S, Services, Svc, Tenant, TurnId, UserId
from memstream.apps.gateway.errors import MAX_ERRORS
from memstream.core.chat import turns_from_messages
from memstream.core.units import UNITS, content_hash, unit_from_payload
from memstream.core.validation import Limits, Rejection, validate
from memstream.schemas.api import MessagesIn, Problem, TurnBatch, TurnIn, TurnsAccepted, TurnsIn, TurnStored
from memstream.schemas.events import Turn, partition_key, unit_id_for
from memstream.schemas.topics import TURNS

router = APIRouter(tags=["ingest"])


@router.post("/v1/turns", status_code=202, response_model=TurnsAccepted)
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
    turns = [_owned_turn(t, i, tenant, svc.limits) for i, t in enumerate(incoming)]
    topic = svc.settings.kafka.topic(TURNS.name)
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


@router.get(
    "/v1/users/{user_id}/turns/{turn_id}",
    response_model=TurnStored,
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

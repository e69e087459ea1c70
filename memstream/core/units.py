"""The ``units`` collection layout, what a stored unit's flags mean, and from a validated ``Turn`` to a
stored ``Unit``: pure functions, no I/O."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import orjson

from memstream.core.store import CollectionSpec
from memstream.schemas.events import ConsolidationRequest, EventTime, Message, Turn, Unit, unit_id_for

UNITS = "units"
# Payload fields the store indexes (see units_spec).
USER_FIELD = "user_key"  # tenant/user_id: one keyword condition isolates a user across tenants
TENANT_FIELD = "tenant"
# RecMem buffer state: a unit is "buffered" until a consolidation request includes it.
STATE_FIELD = "state"
BUFFERED = "buffered"
CONSOLIDATED = "consolidated"
# The user key while buffered, "" once consolidated: the neighbour query's one keyword condition.
# (Each extra condition costs Qdrant Edge ~5-20 us per query; user + state were two.)
BUFFER_FIELD = "buffer"
# On a trigger unit: the ConsolidationRequest (JSON) it fired, so a redelivery can publish it again.
FIRED_FIELD = "fired_request"
UNIT_FIELD = "unit"  # the Unit record as JSON
TEXT_VECTOR = "text"  # the units' sparse vector: the unit's text as BM25 terms (memstream.core.lexical)


def units_spec(dim: int) -> CollectionSpec:
    return CollectionSpec(
        name=UNITS,
        dim=dim,
        keyword_fields=(USER_FIELD, STATE_FIELD, BUFFER_FIELD),
        numeric_fields=("ts_epoch",),
        tenant_field=TENANT_FIELD,
        sparse_vector=TEXT_VECTOR,
    )


def render_text(messages: Sequence[Message]) -> str:
    """The exchange as it is embedded and shown: one ``speaker: content`` line per message."""
    return "\n".join(f"{m.speaker}: {m.content}" for m in messages)


def content_hash(turn: Turn) -> str:
    """Identity of a turn's content, to tell a redelivery from a reused turn_id."""
    body = orjson.dumps(
        {
            "session": turn.session_id,
            "ts": turn.ts.isoformat(),
            "messages": [m.model_dump() for m in turn.messages],
        }
    )
    return hashlib.sha256(body).hexdigest()


def dialogue_time(turn: Turn, zone: ZoneInfo) -> datetime:
    """Aware dialogue time: a naive ``ts`` is read in ``zone`` (the user's or the default zone)."""
    return turn.ts.replace(tzinfo=zone) if turn.ts.tzinfo is None else turn.ts.astimezone(zone)


def build_unit(turn: Turn, zone: ZoneInfo, extract: Callable[[str, datetime], list[EventTime]]) -> Unit:
    when = dialogue_time(turn, zone)
    text = render_text(turn.messages)
    # Every field comes from an already validated Turn: construct without validating again.
    return Unit.model_construct(
        unit_id=unit_id_for(turn.tenant, turn.user_id, turn.turn_id),
        tenant=turn.tenant,
        user_id=turn.user_id,
        session_id=turn.session_id,
        turn_id=turn.turn_id,
        ts=when,
        timezone=zone.key,
        text=text,
        speakers=list(dict.fromkeys(m.speaker for m in turn.messages)),
        event_times=extract(" ".join(m.content for m in turn.messages), when),
        content_hash=content_hash(turn),
    )


def unit_payload(unit: Unit) -> dict[str, Any]:
    """Store payload: the fields filters and readers use, flat, plus the whole ``Unit`` record
    as JSON under ``unit``. Few top-level keys on purpose: converting a payload into Qdrant
    Edge costs ~2.5 us per key, which made nested payloads the costliest step of ingest."""
    payload: dict[str, Any] = {
        USER_FIELD: unit.key,
        TENANT_FIELD: unit.tenant,
        STATE_FIELD: BUFFERED,
        BUFFER_FIELD: unit.key,
        "ts_epoch": unit.ts.timestamp(),
        "text": unit.text,
        UNIT_FIELD: unit.to_bytes().decode(),
    }
    if unit.event_times:
        payload["event_start_epoch"] = min(e.start.timestamp() for e in unit.event_times)
        payload["event_end_epoch"] = max(e.end.timestamp() for e in unit.event_times)
    return payload


def unit_from_payload(payload: dict[str, Any]) -> Unit:
    return Unit.model_validate_json(payload[UNIT_FIELD])


# ---- a stored unit's flags -------------------------------------------------------------------------
# A unit is stored buffered (unit_payload); a consolidation request that takes it in marks it
# consolidated, which takes it out of its user's buffer (BUFFER_FIELD, the neighbour query's one
# keyword condition); a trigger unit also keeps the request it fired (FIRED_FIELD), so a redelivery
# of its turn publishes that request again (streams/ingest.py).


def in_buffer(user_key: str) -> dict[str, Any]:
    """The one keyword condition that finds a user's buffered units (no request has taken them in)."""
    return {BUFFER_FIELD: user_key}


def consolidated_payload() -> dict[str, Any]:
    """The fields that mark a stored unit consolidated (a new dict: callers may merge into it)."""
    return {STATE_FIELD: CONSOLIDATED, BUFFER_FIELD: ""}


def stored_payload(unit: Unit, consolidated: bool, fired: ConsolidationRequest | None) -> dict[str, Any]:
    """A new unit's payload, written together with the recurrence decision it took part in: marked
    consolidated when a request takes it in, and carrying the request it ``fired`` as its trigger."""
    payload = unit_payload(unit)
    if consolidated:
        payload |= consolidated_payload()
    if fired is not None:
        payload[FIRED_FIELD] = fired.to_bytes().decode()
    return payload


def fired_request(payload: Mapping[str, Any]) -> ConsolidationRequest | None:
    """The request a stored unit fired as its trigger, or None."""
    raw = payload.get(FIRED_FIELD)
    return ConsolidationRequest.model_validate_json(raw) if raw else None

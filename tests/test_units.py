"""A stored unit's flags beside the ``units`` layout (memstream/core/units.py): buffered until a
consolidation request takes it in, and the request a trigger unit fired kept for a redelivery."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from memstream.core.semantic_time import extract_event_times
from memstream.core.units import (
    BUFFER_FIELD,
    BUFFERED,
    CONSOLIDATED,
    FIRED_FIELD,
    STATE_FIELD,
    build_unit,
    consolidated_payload,
    fired_request,
    in_buffer,
    stored_payload,
    unit_payload,
)
from memstream.schemas.events import ConsolidationRequest, Message, Turn, Unit

UNIT: Unit = build_unit(
    Turn(
        tenant="acme",
        user_id="u1",
        session_id="s1",
        turn_id="t1",
        ts=datetime(2026, 3, 1, 9, 30, tzinfo=UTC),
        messages=[Message(speaker="user", content="I moved to Lisbon last spring.")],
    ),
    ZoneInfo("UTC"),
    extract_event_times,
)
REQUEST = ConsolidationRequest(
    request_id="r1",
    tenant="acme",
    user_id="u1",
    trigger_unit_id=UNIT.unit_id,
    unit_ids=["older", UNIT.unit_id],
    similarities=[0.8, 1.0],
    theta_sim=0.5,
    theta_count=2,
    fired_at=UNIT.ts,
)


def test_a_unit_that_took_part_in_no_decision_is_stored_buffered_under_its_user() -> None:
    payload = stored_payload(UNIT, consolidated=False, fired=None)
    assert payload == unit_payload(UNIT)
    assert payload[STATE_FIELD] == BUFFERED
    assert payload[BUFFER_FIELD] == UNIT.key
    assert in_buffer(UNIT.key).items() <= payload.items()  # the neighbour query finds it
    assert fired_request(payload) is None


def test_a_trigger_is_stored_consolidated_with_the_request_it_fired() -> None:
    payload = stored_payload(UNIT, consolidated=True, fired=REQUEST)
    assert payload[STATE_FIELD] == CONSOLIDATED
    assert payload[BUFFER_FIELD] == ""
    assert not in_buffer(UNIT.key).items() <= payload.items()  # out of its user's buffer
    assert FIRED_FIELD in payload
    assert fired_request(payload) == REQUEST  # what a redelivery publishes again


def test_marking_a_stored_unit_consolidated_takes_it_out_of_the_buffer() -> None:
    marks = consolidated_payload()
    assert marks == {STATE_FIELD: CONSOLIDATED, BUFFER_FIELD: ""}
    marks[STATE_FIELD] = BUFFERED  # a caller's copy: the next marks are unchanged
    assert consolidated_payload()[STATE_FIELD] == CONSOLIDATED
    assert unit_payload(UNIT) | consolidated_payload() == stored_payload(UNIT, consolidated=True, fired=None)

"""A user's export (memstream/core/export.py): stored units back to the turns that made them."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import orjson
from hypothesis import given
from hypothesis import strategies as st

from memstream.core.export import export_lines, is_memory_line, turn_of
from memstream.core.units import build_unit, content_hash
from memstream.schemas.events import Message, Role, Turn

ZONE = ZoneInfo("Europe/Lisbon")
content = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=40
).filter(lambda t: t.strip() != "")
lines = st.lists(content, min_size=1, max_size=3).map("\n".join)


@given(lines, lines, st.sampled_from(["Dana", "assistant", "Bo"]))
def test_a_stored_unit_gives_back_its_turn(first: str, second: str, other: str) -> None:
    turn = Turn(
        tenant="acme",
        user_id="u1",
        session_id="s1",
        turn_id="t1",
        ts=datetime(2026, 3, 1, 9, 30, tzinfo=UTC),
        timezone="Europe/Lisbon",
        messages=[
            Message(speaker="Dana", role=Role.USER, content=first),
            Message(speaker=other, role=Role.ASSISTANT, content=second),
        ],
    )
    back = turn_of(build_unit(turn, ZONE, lambda _t, _w: []))
    if other == "Dana":  # one speaker: both messages are hers, and the lines may not tell them apart
        assert "\n".join(f"Dana: {m.content}" for m in back.messages) == f"Dana: {first}\nDana: {second}"
    elif not any(line.startswith(("Dana: ", f"{other}: ")) for line in (first + "\n" + second).split("\n")):
        assert [m.model_dump() for m in back.messages] == [m.model_dump() for m in turn.messages]
        assert content_hash(back) == content_hash(turn.model_copy(update={"ts": back.ts}))
    assert (back.tenant, back.user_id, back.session_id, back.turn_id) == ("acme", "u1", "s1", "t1")
    assert back.ts == turn.ts and 1 <= len(back.messages) <= 2


def test_memory_lines_are_marked_and_turn_lines_are_turns() -> None:
    turn = Turn(
        tenant="acme",
        user_id="u1",
        session_id="s1",
        turn_id="t1",
        ts=datetime(2026, 3, 1, 9, 30, tzinfo=UTC),
        messages=[Message(speaker="Dana", content="I moved to Porto.")],
    )
    out = list(export_lines([build_unit(turn, ZONE, lambda _t, _w: [])], []))
    assert len(out) == 1 and Turn.from_bytes(out[0].strip()).turn_id == "t1"
    assert not is_memory_line(orjson.loads(out[0])) and is_memory_line({"memory": {}})

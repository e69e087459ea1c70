"""The messages shape as turns (memstream/core/chat.py): pure, over generated conversations."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from memstream.core.chat import exchanges, turns_from_messages
from memstream.schemas.api import ChatMessage, MessagesIn
from memstream.schemas.events import Role

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
messages = st.lists(
    st.builds(
        ChatMessage,
        role=st.sampled_from(list(Role)),
        content=st.sampled_from(["hi", "I moved to Porto.", "ok", "Nice!"]),
        name=st.sampled_from([None, "Dana", "Bo"]),
    ),
    min_size=1,
    max_size=12,
)


@given(messages)
def test_exchanges_keep_every_message_in_order_and_pair_only_user_then_assistant(
    ms: list[ChatMessage],
) -> None:
    out = exchanges(ms)
    assert [m for e in out for m in e] == ms
    for e in out:
        assert len(e) == 1 or [m.role for m in e] == [Role.USER, Role.ASSISTANT]
    for a, b in itertools.pairwise(out):  # a lone user message is never followed by its reply
        assert not (len(a) == 1 and a[0].role == Role.USER and b[0].role == Role.ASSISTANT)


@given(messages)
def test_turn_ids_are_the_same_on_a_retry_and_distinct_within_a_request(ms: list[ChatMessage]) -> None:
    body = MessagesIn(user_id="u1", messages=ms)
    first = turns_from_messages(body, "acme", NOW, None)
    retry = turns_from_messages(body, "acme", NOW.replace(hour=13), None)
    assert [t.turn_id for t in first] == [t.turn_id for t in retry]
    assert len({t.turn_id for t in first}) == len(first)
    assert [t.ts for t in first] == sorted(t.ts for t in first) and first[0].ts == NOW
    keyed = turns_from_messages(body, "acme", NOW, "request-1")
    assert {t.turn_id for t in keyed}.isdisjoint(t.turn_id for t in first)


def test_speakers_come_from_the_name_else_the_role() -> None:
    body = MessagesIn(
        user_id="u1",
        messages=[
            ChatMessage(role=Role.USER, content="I moved to Porto.", name="Dana"),
            ChatMessage(role=Role.ASSISTANT, content="Nice!"),
        ],
        ts=datetime(2026, 3, 1, 9, 30),
        timezone="Europe/Lisbon",
    )
    (turn,) = turns_from_messages(body, "acme", NOW, None)
    assert [(m.speaker, m.role) for m in turn.messages] == [
        ("Dana", Role.USER),
        ("assistant", Role.ASSISTANT),
    ]
    assert (turn.tenant, turn.session_id, turn.timezone) == ("acme", "chat", "Europe/Lisbon")
    assert turn.ts == datetime(2026, 3, 1, 9, 30)

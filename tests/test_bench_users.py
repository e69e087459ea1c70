"""The many-user sets of the consolidation benches (bench/users.py): renamed copies of a few users,
each user's turns in order with their timestamps, capped, interleaved turn by turn."""

from __future__ import annotations

from collections import defaultdict
from itertools import islice

from bench.users import many_users, sessions, sessions_closed
from memstream.apps.datasets import RawRecord
from memstream.apps.sample_conversations import generate
from memstream.schemas.events import Turn


def test_copies_keep_each_users_turns_and_times_under_new_ids() -> None:
    sources = [RawRecord(t.key, t.to_bytes()) for t in islice(generate(users=2, days=20), 200)]
    by_source: dict[str, list[Turn]] = defaultdict(list)
    for r in sources:
        turn = Turn.from_bytes(r.value)
        by_source[turn.user_id].append(turn)
    originals = list(by_source.values())

    records = many_users(sources, users=5, turns_per_user=7)

    turns = [Turn.from_bytes(r.value) for r in records]
    assert [r.key for r in records] == [t.key for t in turns]
    by_user: dict[str, list[Turn]] = defaultdict(list)
    for t in turns:
        by_user[t.user_id].append(t)
    assert sorted(by_user) == ["u0000", "u0001", "u0002", "u0003", "u0004"]
    for i, user in enumerate(sorted(by_user)):
        source = originals[i % len(originals)][:7]
        copy = by_user[user]
        assert [(t.turn_id, t.ts, t.messages) for t in copy] == [
            (t.turn_id, t.ts, t.messages) for t in source
        ]
        assert all(user in t.session_id for t in copy)
    sessions = [{t.session_id for t in ts} for ts in by_user.values()]
    assert all(a.isdisjoint(b) for i, a in enumerate(sessions) for b in sessions[i + 1 :])
    # Interleaved: the first round holds every user's first turn.
    assert [t.user_id for t in turns[:5]] == ["u0000", "u0001", "u0002", "u0003", "u0004"]
    assert len(turns) == 35


def test_sessions_are_counted_per_user_and_closed_for_any_reason() -> None:
    sources = [RawRecord(t.key, t.to_bytes()) for t in islice(generate(users=2, days=20), 100)]
    per_copy = len({(r.key, Turn.from_bytes(r.value).session_id) for r in sources})

    assert sessions(many_users(sources, users=4)) == 2 * per_copy  # two copies of each user's sessions
    status = {"memstream_windows_closed": {"session/idle": 3, "session/new_session": 4, "day/end": 9}}
    assert sessions_closed(status, 7)
    assert not sessions_closed(status, 8)  # day windows are not sessions
    assert not sessions_closed({}, 1)

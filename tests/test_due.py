"""The idle timer's index (memstream/core/due.py, memstream.core.windows.idle_due) and the timer
itself (memstream.streams.handlers.IdleWindows): a tick reads the users due, not every user stored."""

from __future__ import annotations

from collections import UserDict
from datetime import timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from memstream.core.due import DueTimes
from memstream.core.windows import UserWindows, advance, close_idle, idle_due
from memstream.streams.handlers import BEHIND_RECHECK_S, IdleWindows
from tests.test_windows import GAP, NOW, UTC, at, feed

keys = st.sampled_from([b"a", b"b", b"c", b"d"])


@given(st.lists(st.tuples(keys, st.none() | st.floats(0, 100)), max_size=60), st.floats(0, 100))
def test_pop_due_gives_each_key_whose_latest_due_has_come_once(sets: list[Any], now: float) -> None:
    due = DueTimes()
    latest: dict[bytes, float | None] = {}
    for key, when in sets:
        due.set(key, when)
        latest[key] = when
    expected = {k for k, when in latest.items() if when is not None and when <= now}
    first = due.pop_due(now, limit=1)
    popped = first + due.pop_due(now)
    assert len(first) == min(1, len(expected))  # at most the limit, the rest left for the next call
    assert sorted(popped) == sorted(expected)  # once each, stale entries dropped
    assert due.pop_due(now) == [] and len(due) == sum(
        1 for when in latest.values() if when is not None and when > now
    )


def test_the_heap_stays_within_twice_the_keys_however_often_they_move() -> None:
    due = DueTimes()
    for n in range(10_000):
        due.set(b"only", float(n))
    assert len(due) == 1 and len(due._heap) <= 2 + 64
    assert due.pop_due(1e9) == [b"only"]


hours = st.integers(0, 24 * 70)


@given(
    st.lists(st.tuples(st.sampled_from(["s1", "s2"]), hours), min_size=1, max_size=8), st.floats(-1e7, 1e7)
)
def test_idle_due_is_the_first_time_close_idle_closes_anything(
    events: list[tuple[str, int]], offset: float
) -> None:
    start = at(2023, 5, 1)
    state, _ = feed([(s, start + timedelta(hours=h)) for s, h in sorted(events, key=lambda e: e[1])])
    assert state is not None
    due = idle_due(state, GAP)
    assert due is not None  # something is open after an event
    now = due + offset
    _, closed = close_idle(state, now=now, idle_close=GAP)
    assert bool(closed) == (now >= due)
    after, _ = close_idle(state, now=max(now, due), idle_close=GAP)
    later = idle_due(after, GAP)
    assert later is None or later > max(now, due)  # what is left is due later, never again now


class Counting(UserDict[bytes, Any]):
    """The window-state table, counting the states read."""

    reads = 0

    def __getitem__(self, key: bytes) -> Any:  # what get() and items() read through
        self.reads += 1
        return super().__getitem__(key)


def states_of(users: int) -> Counting:
    table = Counting()
    for n in range(users):
        state, _ = advance(
            None,
            tenant="t",
            user_id=f"u{n}",
            session_id="s",
            ts=at(2023, 5, 8, 10),
            zone=UTC,
            now=NOW,
            session_gap=GAP,
        )
        table[f"t/u{n}".encode()] = state.to_json()
    return table


def reads_per_tick(users: int) -> int:
    """States read by five ticks with nothing due, after the index was built; then every user's windows
    close once due, and nothing is read or closed after that."""
    table, now = states_of(users), [NOW + 60]
    idle = IdleWindows(table, lambda key: 0, GAP, lambda: now[0])
    idle.close({0}, assignment=1)  # builds the index: one pass over the table
    table.reads = 0
    for _ in range(5):
        assert idle.close({0}, assignment=1).windows == []
    reads = table.reads
    now[0] = NOW + GAP.total_seconds()
    closed: set[str] = set()
    while (done := idle.close({0}, assignment=1)).windows:  # in slices
        closed |= {w.key for w in done.windows}
        assert done.after is not None
        done.after()
    assert len(closed) == users  # every user's windows, once due
    table.reads = 0
    assert idle.close({0}, assignment=1).windows == [] and table.reads == 0  # nothing due any more
    return reads


def test_a_tick_reads_the_users_due_whatever_the_users_stored() -> None:
    """The table is read whole once per assignment (the index is built), then each tick reads only
    the users whose windows are due: none for 10 users and for 5,000 alike."""
    assert [reads_per_tick(10), reads_per_tick(5_000)] == [0, 0]


def test_a_new_event_moves_the_users_due_and_an_assignment_rebuilds_the_index() -> None:
    table, now = states_of(2), [NOW + GAP.total_seconds()]
    idle = IdleWindows(table, lambda key: 0 if key == b"t/u0" else 1, GAP, lambda: now[0])
    idle.close({0}, assignment=1)  # only partition 0 is owned: u1 (partition 1) is not indexed
    # u0 speaks again just before its due (the ingest agent's write tells the index).
    later = UserWindows.from_json(table[b"t/u0"])
    later = UserWindows(**{**later.__dict__, "last_seen": now[0]})
    table[b"t/u0"] = later.to_json()
    idle.saved({b"t/u0": later.to_json()})
    assert idle.close({0}, assignment=1).windows == []  # not due any more
    # A new assignment gives this worker partition 1 as well: the index is rebuilt from the table.
    closed = idle.close({0, 1}, assignment=2)
    assert {w.key for w in closed.windows} == {"t/u1"} and closed.after is not None
    closed.after()  # delivered: the state moves on
    now[0] += GAP.total_seconds()
    assert {w.key for w in idle.close({0, 1}, assignment=2).windows} == {"t/u0"}


def test_a_burst_of_users_going_idle_closes_in_slices() -> None:
    """The timer holds the lock ingest waits for while it publishes: many users due at once are
    closed a slice at a time (the timer asks again, the lock released in between)."""
    table, now = states_of(2_500), [NOW + GAP.total_seconds()]
    idle = IdleWindows(table, lambda key: 0, GAP, lambda: now[0])
    users: list[int] = []
    while (done := idle.close({0}, assignment=1, limit=1_000)).windows:
        users.append(len({w.key for w in done.windows}))
        assert done.after is not None
        done.after()  # the slice was delivered: its users' states move on
    assert users == [1_000, 1_000, 500]


def test_a_user_of_a_partition_with_turns_not_ingested_yet_is_waiting_not_idle() -> None:
    """Idleness is wall-clock time without events: on a loaded worker one slow ingest batch can outlast
    the idle close while the user's next turn waits in the log, and closing then split one session
    into two nodes (issue 27). A partition behind keeps its users open; once caught up they close."""
    table, now = states_of(2), [NOW + GAP.total_seconds()]
    idle = IdleWindows(table, lambda key: 0 if key == b"t/u0" else 1, GAP, lambda: now[0])
    done = idle.close({0, 1}, assignment=1, behind={0})
    assert {w.key for w in done.windows} == {"t/u1"}  # partition 1 is caught up
    assert done.after is not None
    done.after()
    assert idle.close({0, 1}, assignment=1, behind={0}).windows == []  # not even due yet
    now[0] += BEHIND_RECHECK_S
    assert idle.close({0, 1}, assignment=1, behind={0}).windows == []  # looked at again: still behind
    now[0] += BEHIND_RECHECK_S
    closed = idle.close({0, 1}, assignment=1)
    assert [(w.key, w.level.value) for w in closed.windows][:1] == [("t/u0", "session")]

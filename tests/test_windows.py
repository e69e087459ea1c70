"""TiMem window closing, tested directly on plain data."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.core.windows import UserWindows, advance, calendar_bounds, close_idle
from memstream.schemas.events import CloseReason, WindowLevel

UTC = ZoneInfo("UTC")
NY = ZoneInfo("America/New_York")
GAP = timedelta(minutes=30)


NOW = datetime(2024, 1, 1, tzinfo=UTC).timestamp()  # wall clock: after every dialogue time used here


def feed(events: list[tuple[str, datetime]], zone: ZoneInfo = UTC, state: UserWindows | None = None):
    closed = []
    for session, ts in events:
        state, c = advance(
            state, tenant="t", user_id="u", session_id=session, ts=ts, zone=zone, now=NOW, session_gap=GAP
        )
        closed.extend(c)
    return state, closed


def at(*args: int, tz: ZoneInfo = UTC) -> datetime:
    return datetime(*args, tzinfo=tz)  # type: ignore[misc]


def test_first_event_opens_everything_and_closes_nothing() -> None:
    state, closed = feed([("s1", at(2023, 5, 8, 13, 56))])
    assert closed == []
    assert state is not None
    assert set(state.open) == {WindowLevel.SESSION, WindowLevel.DAY, WindowLevel.WEEK, WindowLevel.MONTH}
    assert state.open[WindowLevel.WEEK].start == at(2023, 5, 8)  # a Monday
    assert state.open[WindowLevel.MONTH].end == at(2023, 6, 1)


def test_new_session_id_closes_the_session() -> None:
    _, closed = feed(
        [("s1", at(2023, 5, 8, 10)), ("s1", at(2023, 5, 8, 10, 5)), ("s2", at(2023, 5, 8, 10, 6))]
    )
    assert [(w.level, w.reason) for w in closed] == [(WindowLevel.SESSION, CloseReason.NEW_SESSION)]
    assert closed[0].events == 2
    assert closed[0].start == at(2023, 5, 8, 10) and closed[0].end == at(2023, 5, 8, 10, 5)


def test_gap_in_dialogue_time_closes_a_session_with_the_same_id() -> None:
    _, closed = feed([("s1", at(2023, 5, 8, 10)), ("s1", at(2023, 5, 8, 11))])
    assert [(w.level, w.reason) for w in closed] == [(WindowLevel.SESSION, CloseReason.SESSION_GAP)]


def test_crossing_midnight_closes_the_day_only() -> None:
    _, closed = feed([("s1", at(2023, 5, 8, 23, 50)), ("s1", at(2023, 5, 9, 0, 5))])
    assert [w.level for w in closed] == [WindowLevel.DAY]
    assert closed[0].start == at(2023, 5, 8) and closed[0].end == at(2023, 5, 9)


def test_crossing_a_month_that_is_also_a_week_boundary() -> None:
    # Sunday 2023-04-30 -> Monday 2023-05-01: day, week and month all end.
    _, closed = feed([("a", at(2023, 4, 30, 12)), ("b", at(2023, 5, 1, 12))])
    assert [w.level for w in closed] == [
        WindowLevel.SESSION,
        WindowLevel.DAY,
        WindowLevel.WEEK,
        WindowLevel.MONTH,
    ]
    assert all(w.reason is CloseReason.BOUNDARY for w in closed[1:])


def test_days_are_the_users_days() -> None:
    # 03:00 UTC on the 9th is still the 8th in New York: no day closes.
    _, closed = feed([("s", at(2023, 5, 8, 20)), ("s", at(2023, 5, 9, 3).replace(minute=10))], zone=NY)
    assert [w.level for w in closed] == [WindowLevel.SESSION]  # 7h gap only
    state, _ = feed([("s", at(2023, 5, 8, 20))], zone=NY)
    assert state is not None
    assert state.open[WindowLevel.DAY].start == datetime(2023, 5, 8, tzinfo=NY)


def test_dst_day_is_23_hours() -> None:
    start, end = calendar_bounds(WindowLevel.DAY, datetime(2023, 3, 12, 12, tzinfo=NY))
    assert end.timestamp() - start.timestamp() == timedelta(hours=23).total_seconds()


def test_late_event_changes_no_window() -> None:
    state, _ = feed([("s1", at(2023, 5, 9, 10))])
    state2, closed = feed([("s0", at(2023, 5, 7, 10))], state=state)
    assert closed == []
    assert state2 is not None and state is not None
    assert state2.open == state.open
    assert state2.late_events == 1


def test_idle_closes_session_and_past_calendar_windows() -> None:
    state, _ = feed([("s1", at(2023, 5, 8, 10))])
    assert state is not None
    still, closed = close_idle(state, now=state.last_seen + 60, idle_close=GAP)
    assert closed == [] and still == state
    done, closed = close_idle(state, now=state.last_seen + 3600, idle_close=GAP)
    assert {w.level for w in closed} == {
        WindowLevel.SESSION,
        WindowLevel.DAY,
        WindowLevel.WEEK,
        WindowLevel.MONTH,
    }
    assert all(w.reason is CloseReason.IDLE for w in closed)
    assert done.open == {}
    # The next event opens fresh windows and closes nothing twice.
    _, again = feed([("s1", at(2023, 5, 8, 10, 30))], state=done)
    assert again == []


def test_state_round_trips_through_json() -> None:
    state, _ = feed([("s1", at(2023, 5, 8, 10)), ("s1", at(2023, 5, 8, 10, 5))], zone=NY)
    assert state is not None
    assert UserWindows.from_json(state.to_json()) == state


@settings(max_examples=150)
@given(steps=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60 * 24 * 3)), min_size=1, max_size=40))
def test_closed_windows_are_ordered_disjoint_and_cover_their_events(steps: list[tuple[int, int]]) -> None:
    ts = at(2023, 1, 1)
    events = []
    for session, minutes in steps:
        ts = ts + timedelta(minutes=minutes)
        events.append((f"s{session}", ts))
    state, closed = feed(events)
    total = sum(1 for _ in events)
    for level in WindowLevel:
        mine = [w for w in closed if w.level is level]
        # Each level's closed windows are in time order and do not overlap.
        for a, b in itertools.pairwise(mine):
            assert a.end <= b.start
        for w in mine:
            assert w.start <= w.first_ts <= w.last_ts
            assert w.last_ts <= w.end
        # Every event is counted in exactly one window per level (closed or still open).
        assert state is not None
        assert sum(w.events for w in mine) + state.open[level].events == total


def test_with_last_unit_changes_only_the_latest_unit() -> None:
    state, _ = feed([("s1", at(2023, 5, 8, 10)), ("s1", at(2023, 5, 8, 9))], zone=NY)  # one late event
    assert state is not None and state.late_events == 1
    assert state.with_last_unit("u-1") == replace(state, last_unit_id="u-1")


def test_an_event_keeps_the_late_count_and_the_latest_unit() -> None:
    # advance builds the next state field by field: what it does not change must come through.
    state, _ = feed([("s1", at(2023, 5, 8, 10)), ("s1", at(2023, 5, 8, 9))])
    assert state is not None
    state, _ = feed([("s1", at(2023, 5, 8, 10, 5))], state=state.with_last_unit("u-1"))
    assert state is not None
    assert (state.late_events, state.last_unit_id, state.timezone) == (1, "u-1", "UTC")
    assert state.last_ts == at(2023, 5, 8, 10, 5)

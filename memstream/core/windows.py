"""TiMem window tracking as pure functions over a per-user state.

Each user has at most one open window per level: session, day, week (ISO, Monday first) and
month, all in the user's time zone. A window **closes** when

* a later event shows it ended: a new ``session_id``, a dialogue-time gap longer than
  ``session_gap`` (session), or an event at or past the window's end (day/week/month);
* the user has gone idle: after ``idle_close`` of wall-clock time without events the session
  closes, and so does every day/week/month window whose end the wall clock has passed (a
  replay of old conversations therefore closes all its windows once it goes quiet).

**Late events** (dialogue time earlier than the last event seen, beyond a tolerance) are stored
as units like any other but never move, reopen or close windows: a closed window stays closed,
and summarizers read units by interval, so a late unit still lands in its day/week by time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from memstream.schemas.events import CloseReason, WindowClosed, WindowLevel, name_id

CALENDAR_LEVELS = (WindowLevel.DAY, WindowLevel.WEEK, WindowLevel.MONTH)


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime  # calendar windows: exclusive bound; sessions: last event so far
    first_ts: datetime
    last_ts: datetime
    events: int
    session_id: str | None = None

    def add(self, ts: datetime) -> Window:
        end = max(self.end, ts) if self.session_id is not None else self.end
        # Direct construction: dataclasses.replace is several times slower on this hot path.
        return Window(self.start, end, self.first_ts, max(self.last_ts, ts), self.events + 1, self.session_id)


@dataclass(frozen=True)
class UserWindows:
    tenant: str
    user_id: str
    timezone: str
    open: dict[WindowLevel, Window]
    last_ts: datetime  # latest dialogue time seen
    last_seen: float  # wall-clock (epoch s) of the latest event, for idleness
    late_events: int = 0
    # The latest unit's id (by dialogue time): the unit before the next one of its session, whose
    # vector that unit's context view adds (memstream.core.unit_views).
    last_unit_id: str | None = None

    def with_last_unit(self, unit_id: str) -> UserWindows:
        """This state naming ``unit_id`` its latest unit."""
        return replace(self, last_unit_id=unit_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "user_id": self.user_id,
            "timezone": self.timezone,
            "open": {lvl.value: _window_json(w) for lvl, w in self.open.items()},
            "last_ts": self.last_ts.isoformat(),
            "last_seen": self.last_seen,
            "late_events": self.late_events,
            "last_unit_id": self.last_unit_id,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UserWindows:
        return cls(
            tenant=data["tenant"],
            user_id=data["user_id"],
            timezone=data["timezone"],
            open={WindowLevel(k): _window_from_json(v) for k, v in data["open"].items()},
            last_ts=datetime.fromisoformat(data["last_ts"]),
            last_seen=float(data["last_seen"]),
            late_events=int(data.get("late_events", 0)),
            last_unit_id=data.get("last_unit_id"),
        )


def _window_json(w: Window) -> dict[str, Any]:
    return {
        "start": w.start.isoformat(),
        "end": w.end.isoformat(),
        "first_ts": w.first_ts.isoformat(),
        "last_ts": w.last_ts.isoformat(),
        "events": w.events,
        "session_id": w.session_id,
    }


def _window_from_json(d: dict[str, Any]) -> Window:
    return Window(
        start=datetime.fromisoformat(d["start"]),
        end=datetime.fromisoformat(d["end"]),
        first_ts=datetime.fromisoformat(d["first_ts"]),
        last_ts=datetime.fromisoformat(d["last_ts"]),
        events=int(d["events"]),
        session_id=d.get("session_id"),
    )


def calendar_bounds(level: WindowLevel, ts: datetime) -> tuple[datetime, datetime]:
    """[start, end) of the day / ISO week / month containing ``ts``, in ``ts``'s zone.

    Bounds are built from wall dates and re-attached to the zone, so a DST day is 23 or 25 h.
    """
    tz = ts.tzinfo
    day = ts.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    if level is WindowLevel.DAY:
        start, end = day, day + timedelta(days=1)
    elif level is WindowLevel.WEEK:
        start = day - timedelta(days=day.weekday())
        end = start + timedelta(days=7)
    elif level is WindowLevel.MONTH:
        start = day.replace(day=1)
        end = (
            start.replace(year=start.year + 1, month=1)
            if start.month == 12
            else start.replace(month=start.month + 1)
        )
    else:
        raise ValueError(f"{level} has no calendar bounds")
    return start.replace(tzinfo=tz), end.replace(tzinfo=tz)


def _elapsed(a: datetime, b: datetime) -> timedelta:
    # Real elapsed time: subtracting datetimes of one zone would ignore a DST change.
    return timedelta(seconds=b.timestamp() - a.timestamp())


def _open_calendar(level: WindowLevel, ts: datetime) -> Window:
    start, end = calendar_bounds(level, ts)
    return Window(start=start, end=end, first_ts=ts, last_ts=ts, events=1)


def _open_session(session_id: str, ts: datetime) -> Window:
    return Window(start=ts, end=ts, first_ts=ts, last_ts=ts, events=1, session_id=session_id)


def _closed(state: UserWindows, level: WindowLevel, w: Window, reason: CloseReason) -> WindowClosed:
    ident = f"window/{state.tenant}/{state.user_id}/{level.value}/{w.start.isoformat()}/{w.session_id or ''}"
    return WindowClosed(
        window_id=name_id(ident),
        tenant=state.tenant,
        user_id=state.user_id,
        level=level,
        start=w.start,
        end=w.end,
        timezone=state.timezone,
        session_id=w.session_id,
        first_ts=w.first_ts,
        last_ts=w.last_ts,
        events=w.events,
        reason=reason,
    )


def advance(
    state: UserWindows | None,
    *,
    tenant: str,
    user_id: str,
    session_id: str,
    ts: datetime,
    zone: ZoneInfo,
    now: float,
    session_gap: timedelta,
    late_tolerance: timedelta = timedelta(0),
) -> tuple[UserWindows, list[WindowClosed]]:
    """Feed one event (dialogue time ``ts``) into the user's windows; return the new state and
    the windows it closed, session first, then day, week, month."""
    ts = ts.astimezone(zone)
    if state is None:
        opened = {lvl: _open_calendar(lvl, ts) for lvl in CALENDAR_LEVELS}
        opened[WindowLevel.SESSION] = _open_session(session_id, ts)
        return UserWindows(tenant, user_id, zone.key, opened, ts, now), []

    if ts < state.last_ts - late_tolerance:
        return replace(state, last_seen=now, late_events=state.late_events + 1), []

    closed: list[WindowClosed] = []
    windows = dict(state.open)
    session = windows.get(WindowLevel.SESSION)
    if session is None:
        windows[WindowLevel.SESSION] = _open_session(session_id, ts)
    elif session.session_id != session_id or _elapsed(session.last_ts, ts) > session_gap:
        reason = CloseReason.NEW_SESSION if session.session_id != session_id else CloseReason.SESSION_GAP
        closed.append(_closed(state, WindowLevel.SESSION, session, reason))
        windows[WindowLevel.SESSION] = _open_session(session_id, ts)
    else:
        windows[WindowLevel.SESSION] = session.add(ts)

    for lvl in CALENDAR_LEVELS:
        w = windows.get(lvl)
        if w is None:
            windows[lvl] = _open_calendar(lvl, ts)
        elif ts >= w.end:
            closed.append(_closed(state, lvl, w, CloseReason.BOUNDARY))
            windows[lvl] = _open_calendar(lvl, ts)
        else:
            windows[lvl] = w.add(ts)

    return replace(state, open=windows, last_ts=max(state.last_ts, ts), last_seen=now), closed


def idle_due(state: UserWindows, idle_close: timedelta) -> float | None:
    """The first wall-clock time (epoch seconds) at which ``close_idle`` closes a window of ``state``,
    if no event comes before; None when it has nothing open."""
    idle_at = state.last_seen + idle_close.total_seconds()
    if WindowLevel.SESSION in state.open:
        return idle_at
    ends = [w.end.timestamp() for lvl, w in state.open.items() if lvl in CALENDAR_LEVELS]
    return max(idle_at, min(ends)) if ends else None


def close_idle(
    state: UserWindows, *, now: float, idle_close: timedelta
) -> tuple[UserWindows, list[WindowClosed]]:
    """Close what idleness ends: the session after ``idle_close`` without events, and calendar
    windows whose end the wall clock has passed."""
    closed: list[WindowClosed] = []
    windows = dict(state.open)
    idle = now - state.last_seen >= idle_close.total_seconds()
    session = windows.get(WindowLevel.SESSION)
    if session is not None and idle:
        closed.append(_closed(state, WindowLevel.SESSION, session, CloseReason.IDLE))
        del windows[WindowLevel.SESSION]
    for lvl in CALENDAR_LEVELS:
        w = windows.get(lvl)
        if w is not None and idle and w.end.timestamp() <= now:
            closed.append(_closed(state, lvl, w, CloseReason.IDLE))
            del windows[lvl]
    return replace(state, open=windows), closed

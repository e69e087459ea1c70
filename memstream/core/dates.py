"""Dates as memstream writes them: "8 May 2023", "the week of 1 May 2023", "summer 2023".

One module for every date a person reads, so a memory's text and the context recall renders
name a day the same way. English month names are spelled out here rather than taken from
``strftime("%B")``, which depends on the locale.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from memstream.schemas.events import EventTime, Granularity

__all__ = [
    "MONTH_NAMES",
    "coarse_date",
    "format_date",
    "format_month",
    "parse_date",
    "render_date",
    "render_interval",
    "render_span",
]

MONTH_NAMES = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_SEASON_NAMES = {3: "spring", 6: "summer", 9: "autumn", 12: "winter"}


def format_date(d: date) -> str:
    """``8 May 2023``."""
    return f"{d.day} {MONTH_NAMES[d.month - 1]} {d.year}"


def format_month(d: date) -> str:
    """``May 2023``."""
    return f"{MONTH_NAMES[d.month - 1]} {d.year}"


def parse_date(label: str) -> date | None:
    """The date ``format_date`` wrote as ``label``; None for a day the month does not have."""
    day, month, year = label.split()
    try:
        return date(int(year), MONTH_NAMES.index(month) + 1, int(day))
    except ValueError:
        return None


def render_date(moment: datetime, zone: ZoneInfo) -> str:
    """``8 May 2023``: the day of ``moment`` in ``zone``."""
    return format_date(moment.astimezone(zone).date())


def render_span(start: datetime, end: datetime | None, zone: ZoneInfo) -> str:
    """The days of ``[start, end)`` in ``zone``: "1 May 2023 – 7 May 2023", or one day."""
    first = start.astimezone(zone).date()
    if end is None or end <= start:
        return format_date(first)
    # end is exclusive: a week [1 May 00:00, 8 May 00:00) is "1 May – 7 May".
    last = (end - timedelta(microseconds=1)).astimezone(zone).date()
    if last <= first:
        return format_date(first)
    return f"{format_date(first)} – {format_date(last)}"


def coarse_date(start: datetime, granularity: str, zone: ZoneInfo) -> str:
    """When an event starts, at about its granularity: "2023", "May 2023" (a month or a season),
    "week of 1 May 2023" (a week or a weekend), else the day."""
    d = start.astimezone(zone).date()
    if granularity == "year":
        return str(d.year)
    if granularity in ("month", "season"):
        return format_month(d)
    if granularity in ("week", "weekend"):
        return f"week of {format_date(d)}"
    return format_date(d)


def _calendar_day(bound: datetime, zone: ZoneInfo) -> date:
    """The day an interval bound means. Bounds are local midnights of the speaker's calendar, so
    they are read in their own offset; any other bound is read in ``zone``."""
    if bound.utcoffset() is not None and bound.timetz().replace(tzinfo=None) == time():
        return bound.date()
    return bound.astimezone(zone).date()


def _days(first: date, last: date) -> str:
    if first == last:
        return format_date(first)
    if (first.year, first.month) == (last.year, last.month):
        return f"{first.day}–{last.day} {MONTH_NAMES[last.month - 1]} {last.year}"
    if first.year == last.year:
        return f"{first.day} {MONTH_NAMES[first.month - 1]} – {format_date(last)}"
    return f"{format_date(first)} – {format_date(last)}"


def _month_end(d: date) -> date:
    following = date(d.year + d.month // 12, d.month % 12 + 1, 1)
    return following - timedelta(days=1)


def render_interval(event: EventTime, zone: ZoneInfo) -> str:
    """A readable name for an event time: "7 May 2023", "the week of 1 May 2023", "the weekend of
    6–7 May 2023", "May 2023", "summer 2023", "2022", else the range of days it covers."""
    first = _calendar_day(event.start, zone)
    last = _calendar_day(event.end, zone) - timedelta(days=1)
    g = event.granularity
    if g is Granularity.MOMENT or last < first:
        return format_date(event.start.astimezone(zone).date())
    whole_months = first.day == 1 and last == _month_end(last)
    if g is Granularity.YEAR and whole_months and (first.month, last.month) == (1, 12):
        return str(first.year) if first.year == last.year else f"{first.year}–{last.year}"
    if g is Granularity.SEASON and whole_months and first.month in _SEASON_NAMES:
        name = _SEASON_NAMES[first.month]
        return f"winter {first.year}–{first.year + 1}" if name == "winter" else f"{name} {first.year}"
    if g is Granularity.MONTH and whole_months:
        if (first.year, first.month) == (last.year, last.month):
            return format_month(first)
        if first.year == last.year:
            return f"{MONTH_NAMES[first.month - 1]}–{format_month(last)}"
        return f"{format_month(first)} – {format_month(last)}"
    if g is Granularity.WEEK and first.weekday() == 0 and (last - first).days == 6:
        return f"the week of {format_date(first)}"
    if g is Granularity.WEEKEND:
        return f"the weekend of {_days(first, last)}"
    return _days(first, last)

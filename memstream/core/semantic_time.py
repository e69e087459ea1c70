"""TSM semantic time: when the things a message talks about happen, not only when they were said.

``extract_event_times(text, dialogue_time)`` turns the time expressions of one chat message into half-open
``[start, end)`` intervals on the speaker's calendar, relative to the dialogue time. It runs on every
ingested turn, so a word gate and per-start-word rules keep it to microseconds. Every rule, and what is
deliberately not resolved: docs/semantic-time.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime, timedelta, tzinfo
from functools import lru_cache
from typing import Any

from memstream.schemas.events import EventTime, Granularity

__all__ = ["extract_event_times"]

_Interval = tuple[datetime, datetime, Granularity]
_DateInterval = tuple[date, date, Granularity]

# --- vocabulary ---------------------------------------------------------------------------------------------


def _words(spaced: str) -> list[str]:
    return spaced.split()


_WORD_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40,
    "fifty": 50,
}  # fmt: skip
# Vague counts become a range of units rather than a guess at one of them.
_FUZZY_COUNTS = {"couple": (2, 3), "few": (2, 4), "several": (3, 7)}
_MONTHS = {m: i for i, m in enumerate(_words("jan feb mar apr may jun jul aug sep oct nov dec"), start=1)}
_WEEKDAYS = {d: i for i, d in enumerate(_words("mon tue wed thu fri sat sun"))}
_SEASON_START_MONTH = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
_UNIT_GRANULARITY = {
    "day": Granularity.DAY,
    "week": Granularity.WEEK,
    "weekend": Granularity.WEEKEND,
    "month": Granularity.MONTH,
    "year": Granularity.YEAR,
    "hour": Granularity.MOMENT,
    "minute": Granularity.MOMENT,
}

# --- patterns -----------------------------------------------------------------------------------------------
# They run on the lower-cased text without re.IGNORECASE (4x faster in CPython); the few case-sensitive words
# (May, March, month and weekday abbreviations) are checked against the original text by the resolvers.

_NUM = (
    r"(?<![\d.,])\d{1,3}|an?\s+couple(?:\s+of)?|couple(?:\s+of)?|an?\s+few|few|several|an?|one|two|three|four|"
    r"five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|"
    r"nineteen|twenty|thirty|forty|fifty"
)
_UNIT = r"(?:day|week(?:end)?|month|year|hour|min(?:ute)?)s?"
_MOD = r"this\s+past|this\s+coming|this|last|next|past|coming"
_MONTH_FULL = r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
_MONTH_ABBR = r"(?:jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec)"
_MONTH_ANY = rf"(?:{_MONTH_FULL}|{_MONTH_ABBR})\b\.?"
_WEEKDAY_FULL = r"(?:mon|tues|wednes|thurs|fri|satur|sun)day"
_WEEKDAY_ABBR = r"(?:mon|tues?|wed|thu(?:rs?)?|fri|sat|sun)"
_SEASON = r"spring|summer|autumn|fall|winter"
_YEAR = r"(?:19|20)\d{2}(?!\d)"
_ORD = r"(?:st|nd|rd|th)?"
_WD_PREFIX = rf"(?:{_WEEKDAY_FULL},?\s+)?"
# "in 2000 steps": a number followed by what it counts is a quantity, not a year.
_QUANTITY_NOUNS = (
    r"(?:people|persons|dollars|bucks|euros|pounds|points|steps|miles|km|meters|metres|feet|calories|words|"
    r"pages|pieces|times|units|copies|followers|views|likes|members|items|hours|minutes|seconds)"
)
_NUM_END = r"(?![\w/]|[.-]\d)"  # a number that does not run on into another number, word or path

# (name, words a match can start with, pattern). Order matters: at one position the first rule that matches
# wins, so longer forms come first. In the start words, "#" is any number and NUM/MOD/MONTH/WEEKDAY/SEASON
# stand for the word lists above; a test checks that scanning only from these words loses nothing.
_RULES: list[tuple[str, str, str]] = [
    ("iso", "#", rf"(?<![\w/.-])(?P<iso_y>{_YEAR})-(?P<iso_m>\d{{1,2}})-(?P<iso_d>\d{{1,2}})(?!\d|-\d)"),
    (
        "slash",
        "#",
        rf"(?<![\w/.-])(?P<sl_a>\d{{1,2}})/(?P<sl_b>\d{{1,2}})/(?P<sl_y>{_YEAR}|\d{{2}}){_NUM_END}",
    ),
    (
        "dp",
        "#",
        rf"(?<![\w/.-])(?:{_YEAR}[./]\d{{1,2}}[./]\d{{1,2}}|\d{{1,2}}[.-]\d{{1,2}}[.-]{_YEAR}"
        rf"|\d{{1,2}}-(?:{_MONTH_FULL}|{_MONTH_ABBR})-{_YEAR}){_NUM_END}",
    ),
    ("my", "MONTH", rf"\b(?P<my_m>{_MONTH_ANY}),?\s+(?:of\s+)?(?P<my_y>{_YEAR})"),
    (
        "dmy",
        "# the WEEKDAY",
        rf"\b{_WD_PREFIX}(?:the\s+)?(?<![\d.,/:])(?P<dmy_d>\d{{1,2}}){_ORD}\s+(?:of\s+)?(?P<dmy_m>{_MONTH_ANY})"
        rf"(?:,?\s+(?P<dmy_y>{_YEAR}))?",
    ),
    (
        "mdy",
        "MONTH WEEKDAY",
        rf"\b{_WD_PREFIX}(?P<mdy_m>{_MONTH_ANY})\s+(?:the\s+)?(?P<mdy_d>\d{{1,2}}){_ORD}\b"
        rf"(?![:.]\d|\s*(?:%|[ap]\.?m\b))(?:,?\s+(?P<mdy_y>{_YEAR}))?",
    ),
    ("season_year", "the SEASON", rf"\b(?:the\s+)?(?P<sy_s>{_SEASON})\s+(?:of\s+)?(?P<sy_y>{_YEAR})"),
    ("day_before_yesterday", "the", r"\bthe\s+day\s+before\s+yesterday\b"),
    ("day_after_tomorrow", "the", r"\bthe\s+day\s+after\s+tomorrow\b"),
    ("two_back", "the", r"\bthe\s+(?P<tb_u>week(?:end)?|month|year)\s+before\s+last\b"),
    ("two_ahead", "the", r"\bthe\s+(?P<ta_u>week(?:end)?|month|year)\s+after\s+next\b"),
    ("ago", "# NUM", rf"\b(?P<ago_n>{_NUM})\s+(?P<ago_u>{_UNIT})\s+ago\b"),
    ("from_now", "# NUM", rf"\b(?P<fn_n>{_NUM})\s+(?P<fn_u>{_UNIT})\s+from\s+now\b"),
    (
        "unit",
        "the MOD",
        rf"\b(?P<u_the>the\s+)?(?P<u_mod>{_MOD})\s+(?:(?P<u_n>{_NUM})\s+)?"
        r"(?P<u_u>day|week(?:end)?|month|year)(?P<u_pl>s)?\b",
    ),
    ("weekend", "over on at during", r"\b(?:over|on|at|during)\s+the\s+weekend\b"),
    ("weekday_mod", "MOD", rf"\b(?P<wm_mod>{_MOD})\s+(?P<wm_d>{_WEEKDAY_FULL}|{_WEEKDAY_ABBR})\b"),
    # A weekday followed by a date belongs to that date ("Friday, May 5"), which a later position picks up.
    (
        "weekday",
        "on WEEKDAY",
        rf"(?<!good\s)(?<!black\s)\b(?:on\s+)?(?P<wd_d>{_WEEKDAY_FULL})\b"
        rf"(?!,?\s+(?:the\s+)?\d|,?\s+{_MONTH_ANY}\s*\d)",
    ),
    ("month_mod", "MOD", rf"\b(?P<mm_mod>{_MOD})\s+(?P<mm_m>{_MONTH_FULL})\b(?!\s*\d)"),
    (
        "month",
        "in during since back early late mid the end beginning start middle",
        r"\b(?:(?:in|during|since|back\s+in|(?:in\s+)?(?:early|late)|(?:the\s+)?(?:end|beginning|start|middle)"
        r"\s+of)\s+|(?:in\s+)?mid-?\s*)"
        rf"(?P<mo_m>{_MONTH_FULL})\b(?!\s*\d|,?\s*(?:of\s+)?{_YEAR})",
    ),
    ("season_mod", "MOD", rf"\b(?P<sm_mod>{_MOD})\s+(?P<sm_s>{_SEASON})\b"),
    (
        "season",
        "in during over through throughout",
        rf"\b(?:in|during|over|through(?:out)?)\s+(?:the\s+)?(?:(?:early|late)\s+|mid-?)?(?P<se_s>{_SEASON})\b"
        rf"(?!\s+(?:of|from)\b|\s+{_YEAR})",
    ),
    (
        "year",
        "in during since from back throughout the end beginning start middle",
        r"\b(?:in|during|since|from|back\s+in|throughout|(?:the\s+)?(?:end|beginning|start|middle)\s+of)\s+"
        rf"(?P<yr_y>{_YEAR})(?![%]|[.,/:-]\d|s\b|'s\b|\s*(?:am|pm|a\.m|p\.m)\b|\s+{_QUANTITY_NOUNS}\b)",
    ),
    ("yesterday", "yesterday last", r"\b(?:yesterday|last\s+night)\b"),
    ("today", "today tonight this", r"\b(?:today|tonight|this\s+(?:morning|afternoon|evening))\b"),
    ("tomorrow", "tomorrow", r"\btomorrow\b"),
]

_WORD_CLASSES = {
    "NUM": "a an couple few several " + " ".join(_WORD_NUMBERS),
    "MOD": "this last next past coming",
    "MONTH": "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec",
    "WEEKDAY": "monday tuesday wednesday thursday friday saturday sunday",
    "SEASON": _SEASON.replace("|", " "),
}


def _start_words(spec: str) -> set[str]:
    return {w for item in spec.split() for w in _WORD_CLASSES.get(item, item).split()}


def _compile_by_start() -> dict[str, re.Pattern[str]]:
    """One alternation per start word, holding only the rules that can begin with it, in _RULES order."""
    by_word: dict[str, list[tuple[str, str]]] = {}
    for name, spec, pattern in _RULES:
        for word in _start_words(spec):
            by_word.setdefault(word, []).append((name, pattern))
    return {
        word: re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in rules))
        for word, rules in by_word.items()
    }


_BY_START = _compile_by_start()

# Every match contains a head word (or a number) at most _MAX_LEAD tokens after its start ("the last couple
# of weeks": 4). Trying only the start words found within that distance before a head gives what one finditer
# of all the rules would, at a fraction of the cost: a ~0.5 µs attempt at a few positions, not ~1 µs at every
# character.
_HEADS = frozenset(
    _words(
        "today tonight tomorrow yesterday night morning afternoon evening day days week weeks weekend "
        "weekends month months year years hour hours min mins minute minutes spring summer autumn fall "
        "winter "
        "mon tue tues wed thu thur thurs fri sat sun"  # after last/next/this: "last Tues"
    )
    + _words(_WORD_CLASSES["WEEKDAY"])
    + _words(_WORD_CLASSES["MONTH"])
)
_MAX_LEAD = 5
_TOKEN = re.compile(r"[a-z]+|\d+")
_GATE_TOKEN = re.compile(r"[a-z]+|\d")  # digits one by one, so the gate can test them as set members
_GATE_WORDS = _HEADS | frozenset("0123456789")
# str.lower() changes the length of a few characters ("İ"); offsets must stay aligned with the original.
_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
# Words that are months or weekdays only when capitalised: "I may go", "they march", "sat down", "the sun".
_CASED = frozenset(
    _words("may march jan feb mar apr jun jul aug sep sept oct nov dec")
    + _words("mon tue tues wed thu thur thurs fri sat sun")
)


# --- calendar helpers ---------------------------------------------------------------------------------------


class _Ctx:
    """The dialogue's local calendar: today, the week's Monday, and how to make aware bounds."""

    __slots__ = ("localize", "monday", "now", "text", "today", "tz")

    def __init__(self, text: str, now: datetime, tz: tzinfo) -> None:
        self.text = text
        self.now = now
        self.tz = tz
        self.today = now.date()
        self.monday = self.today - timedelta(days=self.today.weekday())
        # pytz zones need localize(); zoneinfo and fixed offsets take tzinfo= directly.
        self.localize: Callable[[datetime], datetime] | None = getattr(tz, "localize", None)

    def at(self, d: date) -> datetime:
        naive = datetime(d.year, d.month, d.day)
        return self.localize(naive) if self.localize is not None else naive.replace(tzinfo=self.tz)

    def span(self, start: date, end: date, granularity: Granularity) -> _Interval:
        return self.at(start), self.at(end), granularity


def _cased(m: re.Match[str], group: str, ctx: _Ctx) -> bool:
    """False for a lower-case "may", "march" or abbreviation: then it is a verb or another word."""
    return m[group].rstrip(".") not in _CASED or ctx.text[m.start(group)].isupper()


def _month_start(index: int) -> date:
    """First day of a month given as year * 12 + (month - 1), so month arithmetic is integer arithmetic."""
    return date(index // 12, index % 12 + 1, 1)


def _month_index(d: date) -> int:
    return d.year * 12 + d.month - 1


def _add_months(d: date, months: int) -> date:
    index = _month_index(d) + months
    year, month = index // 12, index % 12 + 1
    for day in (d.day, 30, 29, 28):  # clamp 31 Mar - 1 month to the end of February
        try:
            return date(year, month, day)
        except ValueError:
            continue
    raise ValueError("unreachable")


def _count(raw: str) -> tuple[int, int]:
    """'two' -> (2, 2), '14' -> (14, 14), 'a few' -> (2, 4)."""
    word = raw.split()
    if word[0].isdigit():
        return int(word[0]), int(word[0])
    for token in word:
        if token in _FUZZY_COUNTS:
            return _FUZZY_COUNTS[token]
    n = _WORD_NUMBERS[word[0]]
    return n, n


def _unit(raw: str) -> str:
    unit = raw.rstrip("s")
    return "minute" if unit == "min" else unit


def _shift_units(ctx: _Ctx, unit: str, lo: int, hi: int) -> _Interval:
    """Union of the calendar units containing today + lo units .. today + hi units (lo <= hi, may be < 0)."""
    today = ctx.today
    if unit == "day":
        return ctx.span(today + timedelta(days=lo), today + timedelta(days=hi + 1), Granularity.DAY)
    if unit == "week":
        return ctx.span(
            ctx.monday + timedelta(weeks=lo), ctx.monday + timedelta(weeks=hi + 1), Granularity.WEEK
        )
    if unit == "weekend":
        saturday = ctx.monday + timedelta(days=5)
        return ctx.span(
            saturday + timedelta(weeks=lo), saturday + timedelta(weeks=hi, days=2), Granularity.WEEKEND
        )
    if unit == "month":
        index = _month_index(today)
        return ctx.span(_month_start(index + lo), _month_start(index + hi + 1), Granularity.MONTH)
    if unit == "year":
        return ctx.span(date(today.year + lo, 1, 1), date(today.year + hi + 1, 1, 1), Granularity.YEAR)
    step = timedelta(hours=1) if unit == "hour" else timedelta(minutes=1)
    return ctx.now + step * lo, ctx.now + step * (hi + 1), Granularity.MOMENT


def _season_instance(season: str, year: int) -> tuple[date, date]:
    start = date(year, _SEASON_START_MONTH[season], 1)
    return start, _add_months(start, 3)


def _season_distance(today: date, bounds: tuple[date, date]) -> int:
    start, end = bounds
    if start <= today < end:
        return 0
    return (start - today).days if today < start else (today - end).days + 1


def _past_day_of_year(ctx: _Ctx, month: int, day: int) -> date:
    """The most recent month/day not after today (29 Feb looks back to the last leap year)."""
    for year in range(ctx.today.year, ctx.today.year - 9, -1):
        try:
            candidate = date(year, month, day)
        except ValueError:
            continue
        if candidate <= ctx.today:
            return candidate
    raise ValueError(f"no such day: {month}/{day}")


def _next_day_of_year(ctx: _Ctx, month: int, day: int) -> date:
    """The first month/day not before today."""
    for year in range(ctx.today.year, ctx.today.year + 9):
        try:
            candidate = date(year, month, day)
        except ValueError:
            continue
        if candidate >= ctx.today:
            return candidate
    raise ValueError(f"no such day: {month}/{day}")


# --- rule resolvers -----------------------------------------------------------------------------------------
# Groups come from the lower-cased text; _cased() looks at the original where capitalisation matters.


def _r_iso(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    d = date(int(m["iso_y"]), int(m["iso_m"]), int(m["iso_d"]))
    return ctx.span(d, d + timedelta(days=1), Granularity.DAY)


def _r_slash(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    a, b, year = int(m["sl_a"]), int(m["sl_b"]), int(m["sl_y"])
    month, day = (b, a) if a > 12 else (a, b)  # US order unless that cannot be a month
    if year < 100:
        year += 2000 if 2000 + year <= ctx.today.year + 10 else 1900
    d = date(year, month, day)
    return ctx.span(d, d + timedelta(days=1), Granularity.DAY)


def _r_dp(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    found = _dateparser_interval(m[0], ctx.today)
    return None if found is None else ctx.span(*found)


def _r_my(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    if not _cased(m, "my_m", ctx):
        return None
    index = int(m["my_y"]) * 12 + _MONTHS[m["my_m"][:3]] - 1
    return ctx.span(_month_start(index), _month_start(index + 1), Granularity.MONTH)


def _day_month(ctx: _Ctx, day: str, month: str, year: str | None, planned: bool = False) -> _Interval:
    month_number = _MONTHS[month[:3]]
    if year is None and planned:
        d = _next_day_of_year(ctx, month_number, int(day))
    elif year is None:
        d = _past_day_of_year(ctx, month_number, int(day))
    else:
        d = date(int(year), month_number, int(day))
    return ctx.span(d, d + timedelta(days=1), Granularity.DAY)


def _r_dmy(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    if not _cased(m, "dmy_m", ctx):
        return None
    return _day_month(ctx, m["dmy_d"], m["dmy_m"], m["dmy_y"], _planned(ctx, m.start()))


def _r_mdy(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    if not _cased(m, "mdy_m", ctx):
        return None
    return _day_month(ctx, m["mdy_d"], m["mdy_m"], m["mdy_y"], _planned(ctx, m.start()))


def _r_season_year(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    return ctx.span(*_season_instance(m["sy_s"], int(m["sy_y"])), Granularity.SEASON)


def _r_day_before_yesterday(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    return _shift_units(ctx, "day", -2, -2)


def _r_day_after_tomorrow(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    return _shift_units(ctx, "day", 2, 2)


def _r_two_back(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    return _shift_units(ctx, m["tb_u"], -2, -2)


def _r_two_ahead(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    return _shift_units(ctx, m["ta_u"], 2, 2)


def _r_ago(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    lo, hi = _count(m["ago_n"])
    return _shift_units(ctx, _unit(m["ago_u"]), -hi, -lo)


def _r_from_now(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    lo, hi = _count(m["fn_n"])
    return _shift_units(ctx, _unit(m["fn_u"]), lo, hi)


def _modifier(m: re.Match[str], group: str) -> str:
    return " ".join(m[group].split())  # "this  past" -> "this past"


def _direction(mod: str) -> int:
    """-1 for last / past / this past, +1 for next / coming / this coming, 0 for this."""
    if mod == "this":
        return 0
    return 1 if mod == "next" or mod.endswith("coming") else -1


def _r_unit(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    unit, mod = m["u_u"], _modifier(m, "u_mod")
    direction = _direction(mod)
    if unit == "weekend":
        if m["u_n"] is not None or m["u_pl"]:
            return None
        if mod.endswith("coming"):
            # the first weekend that starts after today: this week's, unless it has begun
            ahead = 1 if ctx.today.weekday() >= 5 else 0
            return _shift_units(ctx, "weekend", ahead, ahead)
        return _shift_units(ctx, "weekend", direction, direction)
    if m["u_n"] is not None or m["u_the"] is not None:
        # Rolling window: "the past two weeks", "the next few months", "the last week".
        if direction == 0 or (m["u_n"] is None and (unit == "day" or m["u_pl"])):
            return None  # "the last day of school", "the past years"
        hi = _count(m["u_n"])[1] if m["u_n"] is not None else 1  # vague counts take the wider window
        today = ctx.today
        step = {"day": timedelta(days=1), "week": timedelta(weeks=1)}.get(unit)
        if direction < 0:
            start = today - step * hi if step else _add_months(today, -hi * (12 if unit == "year" else 1))
            return ctx.span(start, today + timedelta(days=1), _UNIT_GRANULARITY[unit])
        end = today + step * hi if step else _add_months(today, hi * (12 if unit == "year" else 1))
        return ctx.span(today, end + timedelta(days=1), _UNIT_GRANULARITY[unit])
    if m["u_pl"] or unit == "day":
        return None  # "last years", "this day"
    return _shift_units(ctx, unit, direction, direction)


def _r_weekend(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    back = 0 if ctx.today.weekday() >= 5 else -1  # the most recent weekend that has started
    return _shift_units(ctx, "weekend", back, back)


def _weekday(ctx: _Ctx, name: str, direction: int) -> _Interval:
    """direction -1: strictly before today; +1: strictly after; 0: in the current week."""
    target = _WEEKDAYS[name[:3]]
    if direction == 0:
        d = ctx.monday + timedelta(days=target)
    elif direction == 1:
        d = ctx.today + timedelta(days=(target - ctx.today.weekday() - 1) % 7 + 1)
    else:
        d = ctx.today - timedelta(days=(ctx.today.weekday() - target - 1) % 7 + 1)
    return ctx.span(d, d + timedelta(days=1), Granularity.DAY)


def _r_weekday_mod(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    if not _cased(m, "wm_d", ctx):
        return None
    return _weekday(ctx, m["wm_d"], _direction(_modifier(m, "wm_mod")))


def _r_weekday(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    # past tense dominates in chat memory; a plan ("I'll see her on Friday") is the coming one
    return _weekday(ctx, m["wd_d"], 1 if _planned(ctx, m.start()) else -1)


# A plan or an intention in the clause ("will", "going to", "I'm flying to…"): a bare date in it
# is the next one, not the last ("My sister is visiting in March", said in November: next March).
# The futurate progressive is told by verbs of travel and arrangement, as English grammars list them.
_PLANNED = re.compile(
    r"\b(?:will|shall|won't|going\s+to|gonna|about\s+to|plan(?:s|ning)?\s+to|hop(?:e|es|ing)\s+to|"
    r"can't\s+wait|looking\s+forward|"
    r"(?:am|is|are|i'm|we're|they're|you're|he's|she's)\s+(?:\w+\s+)?"
    r"(?:visiting|coming|going|flying|driving|moving|leaving|starting|travell?ing|heading|getting|"
    r"meeting|seeing|having|hosting|taking|running|competing|performing|arriving|returning|joining))\b|"
    r"\w'll\b"
)
_CLAUSE_END = re.compile(r"[.!?;,\n]|\bbut\b")


_DONE = re.compile(r"\b(?:\w+ed|was|were|did|had|went|came|got|saw|made|took|gave|told|said|met|ran|left)\b")


def _planned(ctx: _Ctx, pos: int) -> bool:
    """Whether the clause around ``pos`` speaks of something still to come: the verb nearest before
    the date (or, with none before it, the verbs after it) is a plan rather than a past tense."""
    text = ctx.text.lower()
    start = max((m.end() for m in _CLAUSE_END.finditer(text, 0, pos)), default=0)
    end_match = _CLAUSE_END.search(text, pos)
    end = end_match.start() if end_match else len(text)

    def last(pattern: re.Pattern[str], lo: int, hi: int) -> int:
        return max((m.start() for m in pattern.finditer(text, lo, hi)), default=-1)

    plan, done = last(_PLANNED, start, pos), last(_DONE, start, pos)
    if plan >= 0 or done >= 0:
        return plan > done
    return _PLANNED.search(text, pos, end) is not None and _DONE.search(text, pos, end) is None


def _month_interval(ctx: _Ctx, name: str, mod: str | None, planned: bool = False) -> _Interval:
    month = _MONTHS[name[:3]]
    year, current = ctx.today.year, ctx.today.month
    if mod is None and planned:  # "visiting in March": the next March not before this month
        year += month < current
    elif mod is None:  # bare "in March": the most recent March not after this month
        year -= month > current
    else:
        direction = _direction(mod)
        if direction < 0:
            year -= month >= current
        elif direction > 0:
            year += month <= current
    index = year * 12 + month - 1
    return ctx.span(_month_start(index), _month_start(index + 1), Granularity.MONTH)


def _r_month_mod(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    if not _cased(m, "mm_m", ctx):
        return None
    return _month_interval(ctx, m["mm_m"], _modifier(m, "mm_mod"))


def _r_month(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    if not _cased(m, "mo_m", ctx):
        return None
    return _month_interval(ctx, m["mo_m"], None, _planned(ctx, m.start()))


def _season_candidates(season: str, today: date) -> list[tuple[date, date]]:
    return [_season_instance(season, year) for year in range(today.year - 2, today.year + 2)]


def _r_season_mod(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    season, mod = m["sm_s"], _modifier(m, "sm_mod")
    today = ctx.today
    candidates = _season_candidates(season, today)
    if mod.endswith("coming"):
        bounds = next(b for b in candidates if b[0] > today)
    elif _direction(mod) < 0:
        bounds = [b for b in candidates if b[1] <= today][-1]
    else:
        # "this": nearest instance, the later one on a tie; "next": a year after that
        bounds = min(reversed(candidates), key=lambda b: _season_distance(today, b))
        if mod == "next":
            bounds = _season_instance(season, bounds[0].year + 1)
    return ctx.span(*bounds, Granularity.SEASON)


def _r_season(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    candidates = _season_candidates(m["se_s"], ctx.today)
    if _planned(ctx, m.start()):  # "we'll marry in the spring": the instance not over yet
        bounds = next(b for b in candidates if b[1] > ctx.today)
    else:  # the most recent instance that has started
        bounds = [b for b in candidates if b[0] <= ctx.today][-1]
    return ctx.span(*bounds, Granularity.SEASON)


def _r_year(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    year = int(m["yr_y"])
    return ctx.span(date(year, 1, 1), date(year + 1, 1, 1), Granularity.YEAR)


def _r_yesterday(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    return _shift_units(ctx, "day", -1, -1)


def _r_today(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    return _shift_units(ctx, "day", 0, 0)


def _r_tomorrow(m: re.Match[str], ctx: _Ctx) -> _Interval | None:
    return _shift_units(ctx, "day", 1, 1)


# Each rule's resolver, by the rule's name in _RULES (a test checks that every rule has one).
_RESOLVERS: dict[str, Callable[[re.Match[str], _Ctx], _Interval | None]] = {
    "iso": _r_iso,
    "slash": _r_slash,
    "dp": _r_dp,
    "my": _r_my,
    "dmy": _r_dmy,
    "mdy": _r_mdy,
    "season_year": _r_season_year,
    "day_before_yesterday": _r_day_before_yesterday,
    "day_after_tomorrow": _r_day_after_tomorrow,
    "two_back": _r_two_back,
    "two_ahead": _r_two_ahead,
    "ago": _r_ago,
    "from_now": _r_from_now,
    "unit": _r_unit,
    "weekend": _r_weekend,
    "weekday_mod": _r_weekday_mod,
    "weekday": _r_weekday,
    "month_mod": _r_month_mod,
    "month": _r_month,
    "season_mod": _r_season_mod,
    "season": _r_season,
    "year": _r_year,
    "yesterday": _r_yesterday,
    "today": _r_today,
    "tomorrow": _r_tomorrow,
}


# --- dateparser fallback ------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _dateparser_interval(span: str, base: date) -> _DateInterval | None:
    """dateparser's reading of one explicit-date span, as a day/week/month/year interval.

    Cached per (span, dialogue date): a parse costs about a millisecond, and the reference only matters to
    the day. The RELATIVE_BASE is the dialogue date's local midnight, naive like dateparser expects.
    """
    from dateparser.date import DateDataParser  # imported on first use: it costs ~50 ms at import

    settings: dict[str, Any] = {
        "RELATIVE_BASE": datetime(base.year, base.month, base.day),
        "PREFER_DATES_FROM": "past",
        "PREFER_DAY_OF_MONTH": "first",
        "RETURN_AS_TIMEZONE_AWARE": False,
    }
    try:
        data = DateDataParser(languages=["en"], settings=settings).get_date_data(span)
    except Exception:  # dateparser raises assorted errors on odd input; a failed parse must not fail ingest
        return None
    found = data.date_obj
    if found is None or not 1900 <= found.year <= 2099:
        return None
    d = found.date()
    if data.period == "year":
        return date(d.year, 1, 1), date(d.year + 1, 1, 1), Granularity.YEAR
    if data.period == "month":
        index = _month_index(d)
        return _month_start(index), _month_start(index + 1), Granularity.MONTH
    if data.period == "week":
        monday = d - timedelta(days=d.weekday())
        return monday, monday + timedelta(weeks=1), Granularity.WEEK
    return d, d + timedelta(days=1), Granularity.DAY  # "day", or "time" when a clock time came with it


# --- public API ---------------------------------------------------------------------------------------------


def _candidates(low: str) -> list[tuple[int, re.Pattern[str]]]:
    """(position, rules) for each start word within _MAX_LEAD tokens before a head, in text order."""
    tokens = [(t.start(), t[0]) for t in _TOKEN.finditer(low)]
    picked: dict[int, re.Pattern[str]] = {}
    for i, (_, word) in enumerate(tokens):
        if word in _HEADS or word[0] <= "9":
            for pos, lead in tokens[max(0, i - _MAX_LEAD) : i + 1]:
                rules = _BY_START.get("#" if lead[0] <= "9" else lead)
                if rules is not None:
                    picked[pos] = rules
    return sorted(picked.items(), key=lambda item: item[0])


def extract_event_times(text: str, dialogue_time: datetime) -> list[EventTime]:
    """Time expressions in ``text`` as event-time intervals relative to ``dialogue_time`` (aware).

    Returns them in text order, one per distinct interval; ``[]`` when the text has none.
    """
    tz = dialogue_time.tzinfo
    if tz is None or dialogue_time.utcoffset() is None:
        raise ValueError("dialogue_time must be timezone-aware")
    low = text.lower()
    if len(low) != len(text):
        low = text.translate(_ASCII_LOWER)
    if _GATE_WORDS.isdisjoint(_GATE_TOKEN.findall(low)):
        return []  # the common case: no head word, no digit
    ctx = _Ctx(text, dialogue_time, tz)
    seen: set[tuple[datetime, datetime]] = set()
    found: list[EventTime] = []
    end = 0
    for pos, rules in _candidates(low):
        if pos < end:
            continue  # inside the previous match, as finditer would skip it
        m = rules.match(low, pos)
        if m is None:
            continue
        end = m.end()
        rule = m.lastgroup
        assert rule is not None  # every alternative is a named group
        try:
            interval = _RESOLVERS[rule](m, ctx)
            if interval is None or (interval[0], interval[1]) in seen:
                continue
            start, stop, granularity = interval
            event = EventTime(
                start=start, end=stop, granularity=granularity, expression=text[m.start() : end]
            )
        except (ValueError, OverflowError, StopIteration, IndexError):
            continue  # impossible dates ("31 June") or calendars running past year 1 / 9999
        seen.add((start, stop))
        found.append(event)
    return found

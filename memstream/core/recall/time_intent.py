"""Query time intent (TSM): which span of time a question asks about, and how.

``parse_time_intent(query, now)`` dates a question with ``semantic_time.extract_event_times``, the rules that
date statements at ingest, so a question and the memories it should find are read the same way: every bound
is local midnight in ``now``'s zone, weeks run Monday to Sunday, "last weekend" is Saturday to Monday, and a
bare "in March" is the most recent March not after the asking month (asked in August 2023: March 2023; asked
in February 2023: March 2022). ``expressions`` are spans of the query itself.

What a question adds on top, each a small rule here:

* Relation. "before X", "until X", "till X", "prior to X" -> ``before``; "after X" -> ``after``; "since X" ->
  ``within`` the interval [X.start, now) (X itself when it has not started yet). The relation word either
  directly precedes the expression, or precedes a short phrase (at most four words) that a prepositional
  expression dates: "after the wedding in May" is after May, while "after work yesterday" stays within
  yesterday. "after X ... before Y" -> within [X.end, Y.start). Otherwise, when directional and plain
  expressions mix, the first directional relation wins and keeps only its own intervals.
* Anchors semantic_time reads only after "in"/"during": a month, season or year right after
  before/after/since/until/till ("before March", "after the summer", "before 2020"), and the ends of a
  "between X and Y" or "from X to|until|till|through Y" range, are read as if "in" stood there. A range
  gives one interval, the hull of its two ends ("between March and May" = 1 March - 1 June).
* ``asks_change``: the question is about change or history (used to, anymore, no longer, still, previously,
  formerly, originally, change, switch, history of, over time, "when did ... start/stop/begin/quit/end",
  "before ... now").

Not handled (besides what semantic_time skips): vague spans ("recently", "lately") give no intent; event
anchors ("after the wedding" without a date) give none; a capitalised "May" or "March" after before/after is
read as the month even when it is a name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from memstream.core.semantic_time import extract_event_times

__all__ = ["Interval", "Relation", "TimeIntent", "contains", "distance", "parse_time_intent"]

Relation = Literal["within", "before", "after"]


@dataclass(frozen=True)
class Interval:
    """A half-open span [start, end) of aware datetimes."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.utcoffset() is None or self.end.utcoffset() is None:
            raise ValueError("interval bounds must be timezone-aware")
        if self.end <= self.start:
            raise ValueError("interval must have end > start")


@dataclass(frozen=True)
class TimeIntent:
    """When the asked-about events lie; no intervals means the question has no time intent."""

    intervals: tuple[Interval, ...]
    relation: Relation
    asks_change: bool
    expressions: tuple[str, ...]


# --- rules semantic_time does not have ----------------------------------------------------------------------

_ANCHOR = (
    r"(?:the\s+)?(?:(?:early|late)\s+|mid-?\s*)?"
    r"(?:january|february|march|april|may|june|july|august|september|october|november|december"
    r"|spring|summer|autumn|fall|winter)\b|(?:19|20)\d{2}(?!\d)"
)
# A relation word semantic_time would not read as a preposition, in front of a month, season or year.
_ANCHOR_PREP = re.compile(rf"\b(?:before|after|since|until|till)(?=\s+(?:{_ANCHOR}))", re.IGNORECASE)
_RANGE = re.compile(
    r"\b(?P<open>between|from)\s+[^.?!;]{1,40}?\s+(?P<sep>and|to|until|till|through)\s", re.IGNORECASE
)
_FOLLOWED_BY_ANCHOR = re.compile(rf"\s+(?:{_ANCHOR})", re.IGNORECASE)
_REL_WORD = re.compile(r"\b(?P<rel>before|after|since|until|till|prior\s+to)\b", re.IGNORECASE)
_PREP_START = re.compile(r"(?:in|on|during|over|through|throughout|back\s+in|at)\b", re.IGNORECASE)
_CLAUSE_END = re.compile(r"[.?!;]")
_MAX_GAP_WORDS = 4  # "after [the big family wedding] in May"
_CHANGE = re.compile(
    r"\bused\s+to\b|\bany\s?more\b|\bno\s+longer\b|\bstill\b|\bpreviously\b|\bformerly\b|\boriginally\b"
    r"|\bchang(?:e|ed|es|ing)\b|\bswitch(?:ed|es|ing)?\b|\bhistory\s+of\b|\bover\s+time\b"
    r"|\bwhen\s+did\b[^.?!;]*\b(?:start|stop|begin|quit|end)\b"
    r"|\bbefore\b.*\bnow\b|\bnow\b.*\bbefore\b",
    re.IGNORECASE | re.DOTALL,
)
_DIRECTION: dict[str, Literal["before", "after", "since"]] = {
    "before": "before",
    "until": "before",
    "till": "before",
    "prior to": "before",
    "after": "after",
    "since": "since",
}

_Rel = Literal["within", "before", "after", "since"]


@dataclass
class _Found:
    start: datetime
    end: datetime
    relation: _Rel
    pos: int  # span of the expression in the query
    stop: int


def _as_in(chars: list[str], start: int, end: int) -> None:
    """Overwrite chars[start:end] with "in" padded by spaces, so offsets stay aligned with the query."""
    chars[start:end] = list("in".ljust(end - start))


def _rewrite(query: str) -> tuple[str, list[tuple[int, int]]]:
    """The query with anchor prepositions read as "in", and the (open, sep) offsets of each range."""
    chars = list(query)
    for m in _ANCHOR_PREP.finditer(query):
        _as_in(chars, m.start(), m.end())
    ranges: list[tuple[int, int]] = []
    for m in _RANGE.finditer(query):
        ranges.append((m.start("open"), m.start("sep")))
        for group in ("open", "sep"):
            if _FOLLOWED_BY_ANCHOR.match(query, m.end(group)):
                _as_in(chars, m.start(group), m.end(group))
    return "".join(chars), ranges


def _relation(query: str, seg_start: int, pos: int, stop: int) -> tuple[_Rel, int]:
    """The relation word leading the expression, or the nearest one before it in its clause; and where the
    expression starts once a directly preceding relation word is counted in ("before June 2023")."""
    lead = _REL_WORD.match(query, pos, stop)
    if lead is not None:
        return _DIRECTION[" ".join(lead["rel"].lower().split())], pos
    clause_start = seg_start
    for end in _CLAUSE_END.finditer(query, seg_start, pos):
        clause_start = end.end()
    words = list(_REL_WORD.finditer(query, clause_start, pos))
    if not words:
        return "within", pos
    last = words[-1]  # the nearest one
    between = query[last.end() : pos]
    relation = _DIRECTION[" ".join(last["rel"].lower().split())]
    if not between.strip():
        return relation, last.start()
    # A phrase in between binds only when the expression dates it: "after the wedding in May".
    if len(between.split()) > _MAX_GAP_WORDS or "," in between or not _PREP_START.match(query, pos):
        return "within", pos
    return relation, pos


def _merge_ranges(query: str, found: list[_Found], ranges: list[tuple[int, int]]) -> list[_Found]:
    """Replace the two ends of each "between X and Y" range by their hull."""
    for open_at, sep_at in ranges:
        left = [f for f in found if open_at <= f.pos < sep_at]
        right = [f for f in found if f.pos >= sep_at]
        if not left or not right:
            continue
        right_end = right[0]
        if _CLAUSE_END.search(query, sep_at, right_end.pos):
            continue
        ends = [*left, right_end]
        hull = _Found(min(f.start for f in ends), max(f.end for f in ends), "within", open_at, right_end.stop)
        found = [f for f in found if f not in ends]
        found.append(hull)
        found.sort(key=lambda f: f.pos)
    return found


def parse_time_intent(query: str, now: datetime) -> TimeIntent:
    """The time intent of ``query`` asked at ``now`` (aware): intervals, relation, change, expressions."""
    if now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    asks_change = _CHANGE.search(query) is not None
    rewritten, ranges = _rewrite(query)
    found: list[_Found] = []
    cursor = 0
    for event in extract_event_times(rewritten, now):
        pos = rewritten.find(event.expression, cursor)
        if pos < 0:  # cannot happen: expressions are spans of the text, in text order
            pos = cursor
        stop = pos + len(event.expression)
        rel, pos = _relation(query, cursor, pos, stop)
        found.append(_Found(event.start, event.end, rel, pos, stop))
        cursor = stop
    found = _merge_ranges(query, found, ranges)

    relation: Relation = "within"
    kept: list[tuple[Interval, str]] = []
    befores = [f for f in found if f.relation == "before"]
    afters = [f for f in found if f.relation == "after"]
    if befores and afters and max(f.end for f in afters) < min(f.start for f in befores):
        # "after June and before August": the span between them
        lo, hi = max(f.end for f in afters), min(f.start for f in befores)
        ends = sorted(befores + afters, key=lambda f: f.pos)
        kept = [(Interval(lo, hi), query[f.pos : f.stop]) for f in ends]
    else:
        directional = [f for f in found if f.relation in ("before", "after")]
        if directional:
            relation = "before" if directional[0].relation == "before" else "after"
            found = [f for f in found if f.relation == relation]
        for f in found:
            start, end = f.start, f.end
            if f.relation == "since" and now > start:
                end = now  # "since January": from its start up to the asking time
            kept.append((Interval(start, end), query[f.pos : f.stop]))
    intervals = tuple(dict.fromkeys(iv for iv, _ in kept))  # a shared span ("after X before Y") once
    return TimeIntent(intervals, relation, asks_change, tuple(expr for _, expr in kept))


# --- matching memories against an intent --------------------------------------------------------------------


def _bounds(start: datetime, end: datetime | None) -> tuple[datetime, datetime]:
    if start.utcoffset() is None or (end is not None and end.utcoffset() is None):
        raise ValueError("item bounds must be timezone-aware")
    return start, start if end is None or end < start else end  # no end: an instant


def _satisfies(relation: Relation, iv: Interval, start: datetime, end: datetime) -> bool:
    if relation == "before":
        return end <= iv.start if end > start else start < iv.start
    if relation == "after":
        return start >= iv.end
    if end > start:
        return start < iv.end and iv.start < end
    return iv.start <= start < iv.end  # an instant overlaps when inside


def contains(intent: TimeIntent, start: datetime, end: datetime | None) -> bool:
    """Whether an item dated [start, end) (an instant when end is None) satisfies the intent.

    within: overlaps an interval; before: ends by an interval's start; after: starts at or after an interval's
    end. True when the intent has no intervals: then time does not filter.
    """
    s, e = _bounds(start, end)
    if not intent.intervals:
        return True
    return any(_satisfies(intent.relation, iv, s, e) for iv in intent.intervals)


def distance(intent: TimeIntent, start: datetime, end: datetime | None) -> float:
    """Seconds between the item [start, end) and the nearest intent interval; 0 when they overlap or there
    are no intervals.

    A closeness for ordering: for before/after it measures to the anchor, so "before June" ranks May above
    January; pair it with ``contains`` to drop items on the wrong side.
    """
    s, e = _bounds(start, end)
    if not intent.intervals:
        return 0.0
    gaps = (max(0.0, (iv.start - e).total_seconds(), (s - iv.end).total_seconds()) for iv in intent.intervals)
    return min(gaps)

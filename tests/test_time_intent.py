"""Query time intent (TSM): a question's time span, relation and change intent, and matching items to it."""

from __future__ import annotations

import string
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.core.recall.time_intent import (
    Interval,
    Relation,
    TimeIntent,
    contains,
    distance,
    parse_time_intent,
)

LISBON = ZoneInfo("Europe/Lisbon")
NOW = datetime(2023, 8, 15, 14, 0, tzinfo=UTC)  # Tuesday 15 August 2023
FEB = datetime(2023, 2, 10, 9, 0, tzinfo=UTC)  # before March has begun
LATE_LISBON = datetime(2023, 8, 15, 0, 30, tzinfo=LISBON)  # still 14 August in UTC


def _d(day: str, tz: ZoneInfo | None = None) -> datetime:
    """Local midnight of an ISO date (UTC unless a zone is given)."""
    return datetime.combine(date.fromisoformat(day), time(), tzinfo=tz or UTC)


def _iv(start: str, end: str, tz: ZoneInfo | None = None) -> Interval:
    return Interval(_d(start, tz), _d(end, tz))


# (query, now, expected intervals, relation, asks_change, expressions)
CASES: list[tuple[str, datetime, tuple[Interval, ...], Relation, bool, tuple[str, ...]]] = [
    (
        "What did I do last weekend?",
        NOW,
        (_iv("2023-08-12", "2023-08-14"),),
        "within",
        False,
        ("last weekend",),
    ),
    ("When did Caroline go to the LGBTQ support group?", NOW, (), "within", False, ()),
    ("What happened in March?", NOW, (_iv("2023-03-01", "2023-04-01"),), "within", False, ("in March",)),
    # asked before March has begun: last year's March, as semantic_time reads statements
    ("What happened in March?", FEB, (_iv("2022-03-01", "2022-04-01"),), "within", False, ("in March",)),
    (
        "What happened in September?",
        NOW,
        (_iv("2022-09-01", "2022-10-01"),),
        "within",
        False,
        ("in September",),
    ),
    (
        "What did we do this summer?",
        NOW,
        (_iv("2023-06-01", "2023-09-01"),),
        "within",
        False,
        ("this summer",),
    ),
    ("What did I buy in 2022?", NOW, (_iv("2022-01-01", "2023-01-01"),), "within", False, ("in 2022",)),
    (
        "What happened on 7 May 2023?",
        NOW,
        (_iv("2023-05-07", "2023-05-08"),),
        "within",
        False,
        ("7 May 2023",),
    ),
    ("What happened last week?", NOW, (_iv("2023-08-07", "2023-08-14"),), "within", False, ("last week",)),
    ("What did I eat yesterday?", NOW, (_iv("2023-08-14", "2023-08-15"),), "within", False, ("yesterday",)),
    (
        "What did I eat yesterday?",
        LATE_LISBON,
        (_iv("2023-08-14", "2023-08-15", LISBON),),
        "within",
        False,
        ("yesterday",),
    ),
    (
        "What did I do two weeks ago?",
        NOW,
        (_iv("2023-07-31", "2023-08-07"),),
        "within",
        False,
        ("two weeks ago",),
    ),
    (
        "What did I do before June 2023?",
        NOW,
        (_iv("2023-06-01", "2023-07-01"),),
        "before",
        False,
        ("before June 2023",),
    ),
    (
        "What did I do before March?",
        NOW,
        (_iv("2023-03-01", "2023-04-01"),),
        "before",
        False,
        ("before March",),
    ),
    ("What happened until 2021?", NOW, (_iv("2021-01-01", "2022-01-01"),), "before", False, ("until 2021",)),
    (
        "Which books did I read prior to March 2023?",
        NOW,
        (_iv("2023-03-01", "2023-04-01"),),
        "before",
        False,
        ("prior to March 2023",),
    ),
    (
        "What did I do after the summer of 2022?",
        NOW,
        (_iv("2022-06-01", "2022-09-01"),),
        "after",
        False,
        ("after the summer of 2022",),
    ),
    (
        "What did I do after the summer?",
        NOW,
        (_iv("2023-06-01", "2023-09-01"),),
        "after",
        False,
        ("after the summer",),
    ),
    # the relation word reaches over a phrase that the expression dates...
    (
        "What happened after the wedding in May?",
        NOW,
        (_iv("2023-05-01", "2023-06-01"),),
        "after",
        False,
        ("in May",),
    ),
    # ...but not over one that a bare expression follows
    (
        "What did I do after work yesterday?",
        NOW,
        (_iv("2023-08-14", "2023-08-15"),),
        "within",
        False,
        ("yesterday",),
    ),
    (
        "Where did I live in 2021 before I moved?",
        NOW,
        (_iv("2021-01-01", "2022-01-01"),),
        "within",
        False,
        ("in 2021",),
    ),
    # since X: from X's start up to the asking time
    (
        "What have I read since January?",
        NOW,
        (Interval(_d("2023-01-01"), NOW),),
        "within",
        False,
        ("since January",),
    ),
    (
        "How has my job changed since 2020?",
        NOW,
        (Interval(_d("2020-01-01"), NOW),),
        "within",
        True,
        ("since 2020",),
    ),
    (
        "What did I do between March and May?",
        NOW,
        (_iv("2023-03-01", "2023-06-01"),),
        "within",
        False,
        ("between March and May",),
    ),
    (
        "What happened between 2020 and 2022?",
        NOW,
        (_iv("2020-01-01", "2023-01-01"),),
        "within",
        False,
        ("between 2020 and 2022",),
    ),
    (
        "Between June 2022 and March 2023, where did I work?",
        NOW,
        (_iv("2022-06-01", "2023-04-01"),),
        "within",
        False,
        ("Between June 2022 and March 2023",),
    ),
    (
        "What happened between last week and yesterday?",
        NOW,
        (_iv("2023-08-07", "2023-08-15"),),
        "within",
        False,
        ("between last week and yesterday",),
    ),
    (
        "What did I do from March to May?",
        NOW,
        (_iv("2023-03-01", "2023-06-01"),),
        "within",
        False,
        ("from March to May",),
    ),
    (
        "What did I do after June and before August?",
        NOW,
        (_iv("2023-07-01", "2023-08-01"),),
        "within",
        False,
        ("after June", "before August"),
    ),
    (
        "What did I do in January and in March?",
        NOW,
        (_iv("2023-01-01", "2023-02-01"), _iv("2023-03-01", "2023-04-01")),
        "within",
        False,
        ("in January", "in March"),
    ),
    (
        "What did I do the day before yesterday?",
        NOW,
        (_iv("2023-08-13", "2023-08-14"),),
        "within",
        False,
        ("the day before yesterday",),
    ),
    ("Did Caroline and May meet?", NOW, (), "within", False, ()),  # a name, not a month
    ("What did I do before may?", NOW, (), "within", False, ()),  # lower-case "may" is the verb
    ("Do I still play guitar?", NOW, (), "within", True, ()),
    ("What did I use to eat before, and what do I eat now?", NOW, (), "within", True, ()),
    ("When did I start running?", NOW, (), "within", True, ()),
    ("Does Melanie paint anymore?", NOW, (), "within", True, ()),
    (
        "What was my history of jobs last year?",
        NOW,
        (_iv("2022-01-01", "2023-01-01"),),
        "within",
        True,
        ("last year",),
    ),
]


@pytest.mark.parametrize(
    ("query", "now", "intervals", "relation", "asks_change", "expressions"),
    CASES,
    ids=[f"{i}-{case[0]}" for i, case in enumerate(CASES)],
)
def test_parse_time_intent(
    query: str,
    now: datetime,
    intervals: tuple[Interval, ...],
    relation: Relation,
    asks_change: bool,
    expressions: tuple[str, ...],
) -> None:
    assert parse_time_intent(query, now) == TimeIntent(intervals, relation, asks_change, expressions)


def test_lisbon_bounds_are_local_midnight() -> None:
    (interval,) = parse_time_intent("What did I eat yesterday?", LATE_LISBON).intervals
    assert interval.start.utcoffset() == timedelta(hours=1)
    assert interval.start == datetime(2023, 8, 13, 23, 0, tzinfo=UTC)  # 14 Aug 00:00 in Lisbon (WEST)


def test_naive_now_is_rejected() -> None:
    with pytest.raises(ValueError, match="aware"):
        parse_time_intent("What did I do yesterday?", datetime(2023, 8, 15))


def test_interval_validates() -> None:
    with pytest.raises(ValueError, match="end > start"):
        _iv("2023-08-15", "2023-08-15")
    with pytest.raises(ValueError, match="aware"):
        Interval(datetime(2023, 8, 15), datetime(2023, 8, 16))


# --- contains / distance ------------------------------------------------------------------------------------

MAY = _iv("2023-05-01", "2023-06-01")
JULY = _iv("2023-07-01", "2023-08-01")


def _intent(relation: Relation, *intervals: Interval) -> TimeIntent:
    return TimeIntent(intervals, relation, False, ())


@pytest.mark.parametrize(
    ("relation", "start", "end", "expected"),
    [
        ("within", "2023-05-31", "2023-06-02", True),  # overlaps the end
        ("within", "2023-04-20", "2023-05-01", False),  # touches the start: half-open, no overlap
        ("within", "2023-06-01", "2023-06-02", False),
        ("within", "2023-05-15", None, True),  # an instant inside
        ("within", "2023-06-01", None, False),  # an instant at the exclusive end
        ("before", "2023-04-01", "2023-05-01", True),  # ends exactly at the start
        ("before", "2023-04-01", "2023-05-02", False),
        ("before", "2023-04-30", None, True),
        ("before", "2023-05-01", None, False),  # an instant at the start lies inside, not before
        ("after", "2023-06-01", "2023-06-02", True),
        ("after", "2023-05-31", "2023-06-02", False),
        ("after", "2023-06-01", None, True),
    ],
)
def test_contains(relation: Relation, start: str, end: str | None, expected: bool) -> None:
    assert contains(_intent(relation, MAY), _d(start), _d(end) if end else None) is expected


def test_contains_any_interval_and_no_intent() -> None:
    both = _intent("within", MAY, JULY)
    assert contains(both, _d("2023-07-04"), None)
    assert not contains(both, _d("2023-06-10"), _d("2023-06-20"))
    assert contains(_intent("within"), _d("1999-01-01"), None)  # no intervals: time does not filter


def test_contains_compares_instants_across_zones() -> None:
    # 1 June 00:30 in Lisbon (WEST) is still 31 May in UTC, so inside a UTC May; 01:30 is not
    assert contains(_intent("within", MAY), datetime(2023, 6, 1, 0, 30, tzinfo=LISBON), None)
    assert not contains(_intent("within", MAY), datetime(2023, 6, 1, 1, 30, tzinfo=LISBON), None)


def test_contains_rejects_naive_items() -> None:
    with pytest.raises(ValueError, match="aware"):
        contains(_intent("within", MAY), datetime(2023, 5, 2), None)


def test_distance() -> None:
    day = 86400.0
    intent = _intent("within", MAY, JULY)
    assert distance(intent, _d("2023-05-10"), _d("2023-05-11")) == 0.0  # inside
    assert distance(intent, _d("2023-04-20"), _d("2023-05-02")) == 0.0  # overlapping
    assert distance(intent, _d("2023-04-20"), _d("2023-04-29")) == 2 * day  # before May
    assert distance(intent, _d("2023-06-03"), None) == 2 * day  # an instant, nearer to May's end than July
    assert distance(intent, _d("2023-06-25"), _d("2023-06-28")) == 3 * day  # nearest is July
    assert distance(intent, _d("2023-08-11"), None) == 10 * day
    assert distance(_intent("within"), _d("1999-01-01"), None) == 0.0


def test_distance_orders_before_by_closeness_to_the_anchor() -> None:
    intent = parse_time_intent("What did I do before June 2023?", NOW)
    may, january = (_d("2023-05-20"), _d("2023-05-21")), (_d("2023-01-20"), _d("2023-01-21"))
    assert contains(intent, *may) and contains(intent, *january)
    assert distance(intent, *may) < distance(intent, *january)


# --- properties ---------------------------------------------------------------------------------------------

# Every word semantic_time or this module can date from (digits are left out of the alphabet below).
TIME_WORDS = frozenset(
    " ".join(
        [
            "today tonight tomorrow yesterday night morning afternoon evening day days week weeks",
            "weekend weekends",
            "month months year years hour hours min mins minute minutes spring summer autumn fall winter",
            "mon tue tues wed thu thur thurs fri sat sun",
            "monday tuesday wednesday thursday friday saturday sunday",
            "january february march april may june july august september october november december",
            "jan feb mar apr jun jul aug sep sept oct nov dec",
        ]
    ).split()
)
plain_words = st.text(alphabet=string.ascii_letters, min_size=1, max_size=10).filter(
    lambda w: w.lower() not in TIME_WORDS
)
connectors = st.sampled_from(
    ["before", "after", "since", "until", "between", "and", "from", "to", "in", "on", "last", "next", "the"]
)
any_now = st.datetimes(
    min_value=datetime(1990, 1, 1),
    max_value=datetime(2090, 12, 31),
    timezones=st.sampled_from(
        [UTC, LISBON, ZoneInfo("America/New_York"), ZoneInfo("Asia/Tokyo"), ZoneInfo("Pacific/Kiritimati")]
    ),
)


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(st.one_of(plain_words, connectors), max_size=12),
    punct=st.sampled_from(["", "?", ".", ","]),
)
def test_no_time_words_no_intervals(words: list[str], punct: str) -> None:
    intent = parse_time_intent(" ".join(words) + punct, NOW)
    assert intent.intervals == () and intent.expressions == ()
    assert intent.relation == "within"


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=80), now=any_now)
def test_never_raises_on_any_text(text: str, now: datetime) -> None:
    intent = parse_time_intent(text, now)
    assert len(intent.expressions) >= len(intent.intervals)  # equal, except "after X before Y" -> one span


@settings(max_examples=200, deadline=None)
@given(now=any_now)
def test_yesterday_is_the_day_before_in_nows_zone(now: datetime) -> None:
    intent = parse_time_intent("What did I do yesterday?", now)
    (interval,) = intent.intervals
    day = now.date() - timedelta(days=1)
    assert interval.start == datetime.combine(day, time(), tzinfo=now.tzinfo)
    assert interval.end == datetime.combine(now.date(), time(), tzinfo=now.tzinfo)
    assert (intent.relation, intent.expressions) == ("within", ("yesterday",))


# The expression table: one query per expression, asked on Tuesday 15 August 2023 14:00 UTC.
# Intervals are [start, end) in whole days; coarse readings are deliberate (a recall filter wants
# the interval that surely contains the event: "in early July" is July). Expressions not read
# yet, so recall falls back to similarity alone: "the first week of July", "Christmas", "New
# Year's Eve", "in Q2", "the 1990s", "at the beginning of the year", "recently".
EXPRESSIONS: list[tuple[str, str, str, Relation, bool]] = [
    ("What did I do yesterday?", "2023-08-14", "2023-08-15", "within", False),
    ("What did I do today?", "2023-08-15", "2023-08-16", "within", False),
    ("What will I do tomorrow?", "2023-08-16", "2023-08-17", "within", False),
    ("What happened the day before yesterday?", "2023-08-13", "2023-08-14", "within", False),
    ("What happened two days ago?", "2023-08-13", "2023-08-14", "within", False),
    ("What did I do last night?", "2023-08-14", "2023-08-15", "within", False),
    ("What did I do this morning?", "2023-08-15", "2023-08-16", "within", False),
    ("What happened last week?", "2023-08-07", "2023-08-14", "within", False),
    ("What did I do this week?", "2023-08-14", "2023-08-21", "within", False),
    ("What happened a week ago?", "2023-08-07", "2023-08-14", "within", False),
    ("What happened 3 weeks ago?", "2023-07-24", "2023-07-31", "within", False),
    ("What did I do in the past two weeks?", "2023-08-01", "2023-08-16", "within", False),
    ("What did I do over the last 3 days?", "2023-08-12", "2023-08-16", "within", False),
    ("What did I do last weekend?", "2023-08-12", "2023-08-14", "within", False),
    ("What did I do this weekend?", "2023-08-19", "2023-08-21", "within", False),
    ("What did I do last Monday?", "2023-08-14", "2023-08-15", "within", False),
    ("What happened last Tuesday?", "2023-08-08", "2023-08-09", "within", False),
    ("What did I do on Friday?", "2023-08-11", "2023-08-12", "within", False),
    ("What happened last month?", "2023-07-01", "2023-08-01", "within", False),
    ("What did I do this month?", "2023-08-01", "2023-09-01", "within", False),
    ("What happened earlier this month?", "2023-08-01", "2023-09-01", "within", False),
    ("What happened a month ago?", "2023-07-01", "2023-08-01", "within", False),
    ("What happened two months ago?", "2023-06-01", "2023-07-01", "within", False),
    ("What did I do in the last month?", "2023-07-15", "2023-08-16", "within", False),
    ("What happened last year?", "2022-01-01", "2023-01-01", "within", False),
    ("What did I do this year?", "2023-01-01", "2024-01-01", "within", False),
    ("What happened a year ago?", "2022-01-01", "2023-01-01", "within", False),
    ("What happened on 7 May 2023?", "2023-05-07", "2023-05-08", "within", False),
    ("What happened on May 7, 2023?", "2023-05-07", "2023-05-08", "within", False),
    ("What happened on 2023-05-07?", "2023-05-07", "2023-05-08", "within", False),
    ("What happened on the 3rd of August?", "2023-08-03", "2023-08-04", "within", False),
    ("What happened in May 2023?", "2023-05-01", "2023-06-01", "within", False),
    ("What happened in August 2022?", "2022-08-01", "2022-09-01", "within", False),
    ("What happened in March?", "2023-03-01", "2023-04-01", "within", False),
    ("What happened in early July?", "2023-07-01", "2023-08-01", "within", False),
    ("What happened in late June?", "2023-06-01", "2023-07-01", "within", False),
    ("What happened in 2022?", "2022-01-01", "2023-01-01", "within", False),
    ("What happened this summer?", "2023-06-01", "2023-09-01", "within", False),
    ("What happened last summer?", "2022-06-01", "2022-09-01", "within", False),
    ("What happened in the summer of 2022?", "2022-06-01", "2022-09-01", "within", False),
    ("What happened last winter?", "2022-12-01", "2023-03-01", "within", False),
    ("What happened this spring?", "2023-03-01", "2023-06-01", "within", False),
    ("What happened in the spring?", "2023-03-01", "2023-06-01", "within", False),
    ("What happened in autumn 2022?", "2022-09-01", "2022-12-01", "within", False),
    ("What happened before June 2023?", "2023-06-01", "2023-07-01", "before", False),
    ("What happened before last weekend?", "2023-08-12", "2023-08-14", "before", False),
    ("What happened after 1 July 2023?", "2023-07-01", "2023-07-02", "after", False),
    ("What happened after yesterday?", "2023-08-14", "2023-08-15", "after", False),
    ("What happened since March?", "2023-03-01", "2023-08-15", "within", False),
    ("What happened between May and July?", "2023-05-01", "2023-08-01", "within", False),
    ("What happened between 1 June and 15 June 2023?", "2023-06-01", "2023-06-16", "within", False),
    ("How has my job changed since last year?", "2022-01-01", "2023-08-15", "within", True),
]


@pytest.mark.parametrize(("query", "start", "end", "relation", "asks_change"), EXPRESSIONS)
def test_expression_table(query: str, start: str, end: str, relation: Relation, asks_change: bool) -> None:
    intent = parse_time_intent(query, NOW)
    assert [(iv.start.date().isoformat(), iv.end.date().isoformat()) for iv in intent.intervals] == [
        (start, end)
    ]
    assert (intent.relation, intent.asks_change) == (relation, asks_change)


def test_the_expression_table_is_large_and_distinct() -> None:
    assert len({q for q, *_ in EXPRESSIONS}) == len(EXPRESSIONS) >= 40

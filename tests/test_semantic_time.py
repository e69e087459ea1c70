"""TSM semantic time: expressions in chat turns -> event-time intervals relative to the dialogue time."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.core import semantic_time
from memstream.core.semantic_time import extract_event_times
from memstream.schemas.events import EventTime, Granularity

NY = ZoneInfo("America/New_York")
TOKYO = ZoneInfo("Asia/Tokyo")

# Dialogue times the table refers to by name.
WHEN: dict[str, datetime] = {
    "mon": datetime(2023, 5, 8, 13, 56, tzinfo=UTC),  # Monday 8 May 2023, LoCoMo's first session
    "sun": datetime(2023, 5, 14, 10, 0, tzinfo=UTC),  # Sunday: inside a weekend
    "jan": datetime(2023, 1, 15, 12, 0, tzinfo=UTC),  # Sunday, mid-winter
    "oct": datetime(2023, 10, 20, 18, 0, tzinfo=UTC),  # Friday, autumn
    "ny_dst": datetime(2023, 3, 13, 9, 0, tzinfo=NY),  # Monday after the US switch to daylight time
    "ny_late": datetime(2023, 5, 8, 22, 30, tzinfo=NY),  # Monday evening in New York, already Tuesday in UTC
    "tokyo": datetime(2023, 5, 8, 23, 30, tzinfo=UTC).astimezone(TOKYO),  # Tuesday morning in Tokyo
}

D, W, WE, M, S, Y, MO = (
    Granularity.DAY,
    Granularity.WEEK,
    Granularity.WEEKEND,
    Granularity.MONTH,
    Granularity.SEASON,
    Granularity.YEAR,
    Granularity.MOMENT,
)

Expected = tuple[
    str, str, Granularity
]  # local start, local end ("YYYY-MM-DD" or "YYYY-MM-DDTHH:MM"), granularity

CASES: list[tuple[str, str, list[Expected]]] = [
    # days
    ("I went to a support group yesterday.", "mon", [("2023-05-07", "2023-05-08", D)]),
    ("We stayed up late last night.", "mon", [("2023-05-07", "2023-05-08", D)]),
    ("Today was a lot.", "mon", [("2023-05-08", "2023-05-09", D)]),
    ("I'm seeing her tonight!", "mon", [("2023-05-08", "2023-05-09", D)]),
    ("This morning I went for a run.", "mon", [("2023-05-08", "2023-05-09", D)]),
    ("Tomorrow I fly out.", "mon", [("2023-05-09", "2023-05-10", D)]),
    ("It was the day before yesterday.", "mon", [("2023-05-06", "2023-05-07", D)]),
    ("It's the day after tomorrow.", "mon", [("2023-05-10", "2023-05-11", D)]),
    # N units ago / from now
    ("I went to a conference two days ago.", "mon", [("2023-05-06", "2023-05-07", D)]),
    ("3 days ago it rained", "mon", [("2023-05-05", "2023-05-06", D)]),
    ("a few days ago", "mon", [("2023-05-04", "2023-05-07", D)]),
    ("a couple of days ago", "mon", [("2023-05-05", "2023-05-07", D)]),
    ("We went camping two weeks ago.", "mon", [("2023-04-24", "2023-05-01", W)]),
    ("about a week ago", "mon", [("2023-05-01", "2023-05-08", W)]),
    ("a pride parade I went to a few weeks ago", "mon", [("2023-04-10", "2023-05-01", W)]),
    ("I quit three months ago.", "mon", [("2023-02-01", "2023-03-01", M)]),
    ("my 18th birthday ten years ago", "mon", [("2013-01-01", "2014-01-01", Y)]),
    ("a year ago", "mon", [("2022-01-01", "2023-01-01", Y)]),
    ("camping with my fam two weekends ago", "mon", [("2023-04-29", "2023-05-01", WE)]),
    ("I saw it an hour ago", "mon", [("2023-05-08T12:56", "2023-05-08T13:56", MO)]),
    ("two days from now", "mon", [("2023-05-10", "2023-05-11", D)]),
    # last / this / next calendar units
    ("I was sick last week.", "mon", [("2023-05-01", "2023-05-08", W)]),
    ("this week has been busy", "mon", [("2023-05-08", "2023-05-15", W)]),
    ("see you next week", "mon", [("2023-05-15", "2023-05-22", W)]),
    ("last month", "mon", [("2023-04-01", "2023-05-01", M)]),
    ("this month", "mon", [("2023-05-01", "2023-06-01", M)]),
    ("Next month I start a new job.", "mon", [("2023-06-01", "2023-07-01", M)]),
    ("I painted that last year.", "mon", [("2022-01-01", "2023-01-01", Y)]),
    ("this year", "mon", [("2023-01-01", "2024-01-01", Y)]),
    ("next year", "mon", [("2024-01-01", "2025-01-01", Y)]),
    ("the week before last", "mon", [("2023-04-24", "2023-05-01", W)]),
    ("the past two weeks", "mon", [("2023-04-24", "2023-05-09", W)]),
    ("over the next few months", "mon", [("2023-05-08", "2023-09-09", M)]),
    # weekends (dateparser returns nothing for these)
    ("I had a quiet time last weekend.", "mon", [("2023-05-06", "2023-05-08", WE)]),
    ("Any plans this weekend?", "mon", [("2023-05-13", "2023-05-15", WE)]),
    ("next weekend", "mon", [("2023-05-20", "2023-05-22", WE)]),
    ("that roadtrip this past weekend", "mon", [("2023-05-06", "2023-05-08", WE)]),
    ("I read it over the weekend", "mon", [("2023-05-06", "2023-05-08", WE)]),
    ("last weekend", "sun", [("2023-05-06", "2023-05-08", WE)]),
    ("this weekend", "sun", [("2023-05-13", "2023-05-15", WE)]),
    ("this coming weekend", "sun", [("2023-05-20", "2023-05-22", WE)]),
    ("this coming weekend", "mon", [("2023-05-13", "2023-05-15", WE)]),
    # weekdays
    ("I went on Friday", "mon", [("2023-05-05", "2023-05-06", D)]),
    ("Last Fri I took my kids to a workshop.", "mon", [("2023-05-05", "2023-05-06", D)]),
    ("I joined a new group last Tues.", "mon", [("2023-05-02", "2023-05-03", D)]),
    ("last Monday", "mon", [("2023-05-01", "2023-05-02", D)]),
    ("next Friday", "mon", [("2023-05-12", "2023-05-13", D)]),
    ("this coming Monday", "mon", [("2023-05-15", "2023-05-16", D)]),
    ("this Wednesday", "mon", [("2023-05-10", "2023-05-11", D)]),
    ("Saturday night was wild", "sun", [("2023-05-13", "2023-05-14", D)]),
    # month names (dateparser would copy the reference day-of-month)
    ("I started in March.", "mon", [("2023-03-01", "2023-04-01", M)]),
    ("in May", "mon", [("2023-05-01", "2023-06-01", M)]),
    ("last May", "mon", [("2022-05-01", "2022-06-01", M)]),
    ("in June", "mon", [("2022-06-01", "2022-07-01", M)]),
    ("next March", "mon", [("2024-03-01", "2024-04-01", M)]),
    ("in March", "jan", [("2022-03-01", "2022-04-01", M)]),
    ("back in early February", "mon", [("2023-02-01", "2023-03-01", M)]),
    ("mid-March", "mon", [("2023-03-01", "2023-04-01", M)]),
    ("the end of April", "mon", [("2023-04-01", "2023-05-01", M)]),
    # explicit dates
    ("on 8 May 2023", "oct", [("2023-05-08", "2023-05-09", D)]),
    ("1:56 pm on 8 May, 2023", "oct", [("2023-05-08", "2023-05-09", D)]),
    ("May 8th", "mon", [("2023-05-08", "2023-05-09", D)]),
    ("May 9th", "mon", [("2022-05-09", "2022-05-10", D)]),
    ("on May 8, 2023", "oct", [("2023-05-08", "2023-05-09", D)]),
    ("2023-05-08", "oct", [("2023-05-08", "2023-05-09", D)]),
    ("05/08/2023", "oct", [("2023-05-08", "2023-05-09", D)]),
    ("25/12/2022", "oct", [("2022-12-25", "2022-12-26", D)]),
    ("the 3rd of April, 2021", "mon", [("2021-04-03", "2021-04-04", D)]),
    ("It was Monday, May 1 I think", "mon", [("2023-05-01", "2023-05-02", D)]),
    ("Sept. 3rd, 2021", "mon", [("2021-09-03", "2021-09-04", D)]),
    ("March 2022", "mon", [("2022-03-01", "2022-04-01", M)]),
    ("in March of 2022", "mon", [("2022-03-01", "2022-04-01", M)]),
    # dateparser fallback
    ("The appointment was 2023/05/08.", "oct", [("2023-05-08", "2023-05-09", D)]),
    ("flight moved to 8-May-2023", "oct", [("2023-05-08", "2023-05-09", D)]),
    ("08.05.2023", "oct", [("2023-08-05", "2023-08-06", D)]),  # dateparser's MDY default
    # years
    ("I was born in 1990.", "mon", [("1990-01-01", "1991-01-01", Y)]),
    ("I've been painting since 2016.", "mon", [("2016-01-01", "2017-01-01", Y)]),
    ("by the end of 2019", "mon", [("2019-01-01", "2020-01-01", Y)]),
    # seasons (meteorological, northern hemisphere)
    ("last summer", "mon", [("2022-06-01", "2022-09-01", S)]),
    ("a family outing this summer?", "mon", [("2023-06-01", "2023-09-01", S)]),
    ("this winter", "mon", [("2022-12-01", "2023-03-01", S)]),
    ("next winter", "mon", [("2023-12-01", "2024-03-01", S)]),
    ("in the spring", "mon", [("2023-03-01", "2023-06-01", S)]),
    ("in the fall", "mon", [("2022-09-01", "2022-12-01", S)]),
    ("this winter", "jan", [("2022-12-01", "2023-03-01", S)]),
    ("last winter", "jan", [("2021-12-01", "2022-03-01", S)]),
    ("this coming spring", "jan", [("2023-03-01", "2023-06-01", S)]),
    ("last summer", "oct", [("2023-06-01", "2023-09-01", S)]),
    ("in the summer of 2021", "mon", [("2021-06-01", "2021-09-01", S)]),
    ("winter 2022", "mon", [("2022-12-01", "2023-03-01", S)]),
    # other zones: calendar days are the speaker's
    ("yesterday", "ny_late", [("2023-05-07", "2023-05-08", D)]),
    ("yesterday", "tokyo", [("2023-05-08", "2023-05-09", D)]),
    ("last week", "ny_dst", [("2023-03-06", "2023-03-13", W)]),
    ("this weekend", "ny_dst", [("2023-03-18", "2023-03-20", WE)]),
    ("in March", "ny_dst", [("2023-03-01", "2023-04-01", M)]),
    # several in one text, in text order; identical intervals reported once
    (
        "Yesterday was fun, and last week too.",
        "mon",
        [("2023-05-07", "2023-05-08", D), ("2023-05-01", "2023-05-08", W)],
    ),
    ("Last night... yes, yesterday, was great.", "mon", [("2023-05-07", "2023-05-08", D)]),
    (
        "In 2019 I moved, and last March I came back.",
        "mon",
        [("2019-01-01", "2020-01-01", Y), ("2023-03-01", "2023-04-01", M)],
    ),
]

NEGATIVE = [
    "I may go to the party.",
    "May I ask you something?",
    "They march through the park.",
    "It was the second time I tried.",
    "I started that a while ago.",
    "It happened long ago, years ago really.",
    "We sat in the sun for hours.",
    "I sat down and watched the sun set.",
    "I have 2 kids and 3 dogs.",
    "My score was 1500 out of 2000.",
    "There were around 2000 people there.",
    "I walked in 2000 steps!",
    "Version 3.11.7 is out.",
    "I'm 25 years old and I've worked here for 3 years.",
    "That was my last day at work.",
    "The last time we spoke you were in Paris.",
    "Next time, let's go together.",
    "I'm free on Fridays.",
    "We ate hot cross buns on Good Friday.",
    "Summer camp was amazing.",
    "I fall asleep so fast.",
    "June said hi to April.",
    "At 10:30 May joined us.",
    "Only a second, please.",
    "It happened one day.",
    "I went recently and the other day too.",
    "This is so cool!",
    "",
]


def _bound(value: str, tz: tzinfo) -> datetime:
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=tz)


@pytest.mark.parametrize(("text", "when", "expected"), CASES, ids=[f"{c[1]}:{c[0][:40]}" for c in CASES])
def test_expression_table(text: str, when: str, expected: list[Expected]) -> None:
    dialogue_time = WHEN[when]
    tz = dialogue_time.tzinfo
    assert tz is not None
    got = extract_event_times(text, dialogue_time)
    want = [(_bound(start, tz), _bound(end, tz), granularity) for start, end, granularity in expected]
    assert [(e.start, e.end, e.granularity) for e in got] == want
    for event in got:
        assert event.expression in text
        # bounds are local midnights of the speaker's zone (same wall time and same UTC offset)
        assert event.start.utcoffset() == event.start.astimezone(tz).utcoffset()


def test_table_is_big_enough() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize("text", NEGATIVE)
def test_false_positives_give_nothing(text: str) -> None:
    assert extract_event_times(text, WHEN["mon"]) == []


def test_expression_is_the_matched_span() -> None:
    got = extract_event_times("Hey! Last Friday I went, and in March too. Back in 2019 as well.", WHEN["mon"])
    assert [e.expression for e in got] == ["Last Friday", "in March", "Back in 2019"]


def test_dst_week_bounds_keep_their_own_offsets() -> None:
    (week,) = extract_event_times("last week", WHEN["ny_dst"])
    assert week.start.utcoffset() == timedelta(hours=-5)  # EST
    assert week.end.utcoffset() == timedelta(hours=-4)  # EDT
    assert week.end.astimezone(UTC) - week.start.astimezone(UTC) == timedelta(days=7, hours=-1)


def test_naive_dialogue_time_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        extract_event_times("yesterday", datetime(2023, 5, 8, 13, 56))


def test_results_are_event_time_records() -> None:
    (event,) = extract_event_times("yesterday", WHEN["mon"])
    assert isinstance(event, EventTime)
    assert EventTime.from_bytes(event.to_bytes()) == event


def test_dates_past_the_calendar_are_skipped() -> None:
    assert extract_event_times("tomorrow", datetime(9999, 12, 31, 12, tzinfo=UTC)) == []
    assert extract_event_times("31 June 2023 and 2023-02-30", WHEN["mon"]) == []


# Real-looking chat turns (written for this test, LoCoMo style), each with a Monday 8 May 2023 dialogue time.
CHAT = [
    ("Hey Mel! I went to an LGBTQ support group yesterday and it was so powerful.", [("yesterday", D)]),
    (
        "Wow! Last Friday I finally took my kids to a pottery workshop, they loved it.",
        [("Last Friday", D)],
    ),
    ("Thanks! I got the tattoo a few years ago, it stands for freedom.", [("a few years ago", Y)]),
    (
        "We went camping with the kids two weekends ago and hiked to the falls. Next month we're off again!",
        [("two weekends ago", WE), ("Next month", M)],
    ),
    ("I've been reading the book you recommended a while ago. So good!", []),
    ("Painting keeps me busy - I started about five years ago.", [("five years ago", Y)]),
    (
        "I passed the adoption agency interviews last week! Hoping to hear back this summer.",
        [("last week", W), ("this summer", S)],
    ),
    ("My daughter's birthday is on the 13th, we're doing a big party.", []),
    ("Back in 2019 I was in a really different place, you know?", [("Back in 2019", Y)]),
    ("That pic is from last night - everyone was having a blast.", [("last night", D)]),
]


@pytest.mark.parametrize(("text", "expected"), CHAT)
def test_chat_like_turns(text: str, expected: list[tuple[str, Granularity]]) -> None:
    got = extract_event_times(text, WHEN["mon"])
    assert [(e.expression, e.granularity) for e in got] == expected
    for event in got:
        assert event.end <= datetime(2023, 9, 1, tzinfo=UTC)


# --- properties ---------------------------------------------------------------------------------------------

ZONES = [
    UTC,
    NY,
    TOKYO,
    ZoneInfo("Europe/Berlin"),
    ZoneInfo("Australia/Lord_Howe"),
    ZoneInfo("America/Santiago"),
]
WORDS = [
    "I", "we", "went", "to", "the", "a", "an", "in", "on", "of", "since", "back", "over", "during", "last",
    "this", "next", "past", "coming", "yesterday", "today", "tonight", "tomorrow", "night", "morning", "day",
    "days", "week", "weeks", "weekend", "weekends", "month", "months", "year", "years", "ago", "from", "now",
    "before", "after", "few", "couple", "several", "two", "ten", "3", "12", "2019", "2023", "8", "May", "may",
    "March", "march", "June", "Friday", "Fri", "fri", "Sat", "sun", "Sunday", "summer", "winter", "fall",
    "spring", "early", "mid-", "end", "hour", "hours", ",", ".", "5/8/2023", "2023-05-08", "8th", "the end",
    "Monday,", "2023/05/08",
]  # fmt: skip
PAST_PHRASES = [
    "yesterday",
    "last night",
    "the day before yesterday",
    "{n} days ago",
    "{n} weeks ago",
    "{n} months ago",
    "{n} years ago",
    "a few days ago",
    "last week",
    "last weekend",
    "this past weekend",
    "last month",
    "last year",
    "last Friday",
    "last summer",
    "the week before last",
]

dialogue_times = st.builds(
    lambda naive, zone: naive.replace(tzinfo=zone),
    st.datetimes(min_value=datetime(1950, 1, 1), max_value=datetime(2090, 12, 31)),
    st.sampled_from(ZONES),
)
word_texts = st.lists(st.sampled_from(WORDS), max_size=25).map(" ".join)


def _check_invariants(text: str, events: list[EventTime]) -> None:
    position = 0
    seen = set()
    for event in events:
        assert event.end > event.start
        assert event.start.tzinfo is not None and event.start.utcoffset() is not None
        assert event.end.tzinfo is not None and event.end.utcoffset() is not None
        found = text.find(event.expression, position)
        assert found >= 0, "expressions come in text order"
        position = found + 1
        assert (event.start, event.end) not in seen
        seen.add((event.start, event.end))


@settings(max_examples=300, deadline=None)
@given(text=word_texts, dialogue_time=dialogue_times)
def test_intervals_are_well_formed(text: str, dialogue_time: datetime) -> None:
    _check_invariants(text, extract_event_times(text, dialogue_time))


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200), dialogue_time=dialogue_times)
def test_arbitrary_text_never_fails(text: str, dialogue_time: datetime) -> None:
    _check_invariants(text, extract_event_times(text, dialogue_time))


@settings(max_examples=300, deadline=None)
@given(
    phrase=st.sampled_from(PAST_PHRASES),
    n=st.integers(min_value=1, max_value=40),
    before=word_texts,
    dialogue_time=dialogue_times,
)
def test_past_expressions_end_by_the_end_of_the_dialogue_day(
    phrase: str, n: int, before: str, dialogue_time: datetime
) -> None:
    expression = phrase.format(n=n)
    (alone,) = extract_event_times(expression, dialogue_time)
    day_end = datetime.combine(
        dialogue_time.date() + timedelta(days=1), datetime.min.time(), dialogue_time.tzinfo
    )
    assert alone.end <= day_end
    # in a sentence it reads the same (an identical earlier interval may have claimed it)
    in_text = extract_event_times(f"{before} so {expression}!", dialogue_time)
    assert (alone.start, alone.end, alone.granularity) in [(e.start, e.end, e.granularity) for e in in_text]


def _plain_scan(low: str) -> list[tuple[tuple[int, int], str | None]]:
    rules = re.compile("|".join(f"(?P<{name}>{pattern})" for name, _, pattern in semantic_time._RULES))
    return [(m.span(), m.lastgroup) for m in rules.finditer(low)]


def _fast_scan(low: str) -> list[tuple[tuple[int, int], str | None]]:
    found = []
    end = 0
    for pos, rules in semantic_time._candidates(low):
        if pos >= end and (m := rules.match(low, pos)) is not None:
            found.append((m.span(), m.lastgroup))
            end = m.end()
    return found


@settings(max_examples=400, deadline=None)
@given(text=word_texts)
def test_scanning_from_start_words_finds_what_a_full_scan_finds(text: str) -> None:
    """The speed-up (rules tried only near head words) must not lose or change any match."""
    low = text.lower()
    assert _fast_scan(low) == _plain_scan(low)


@pytest.mark.parametrize("text", [c[0] for c in CASES] + [c[0] for c in CHAT] + NEGATIVE)
def test_fast_scan_matches_full_scan_on_examples(text: str) -> None:
    low = text.lower()
    assert _fast_scan(low) == _plain_scan(low)


def test_past_expression_on_each_weekday() -> None:
    monday = date(2023, 5, 8)
    for offset in range(7):
        when = datetime.combine(monday + timedelta(days=offset), datetime.min.time(), UTC)
        (friday,) = extract_event_times("last Friday", when)
        assert friday.start.weekday() == 4
        assert timedelta(days=1) <= when - friday.start <= timedelta(days=7)
        (weekend,) = extract_event_times("last weekend", when)
        assert weekend.start.weekday() == 5 and weekend.end <= when


def test_every_rule_has_its_resolver() -> None:
    """A rule without one would raise only when it first matched, on a turn in production."""
    assert list(semantic_time._RESOLVERS) == [name for name, _, _ in semantic_time._RULES]


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("My sister is visiting Lisbon in March.", date(2027, 3, 1)),  # a plan: the next March
        ("I visited Lisbon in March.", date(2026, 3, 1)),
        ("In March my sister is visiting.", date(2027, 3, 1)),
        ("In March we moved.", date(2026, 3, 1)),
        ("It was amazing in March, and I will go again.", date(2026, 3, 1)),  # the plan is another clause
        ("I will never forget what happened in March", date(2026, 3, 1)),  # the nearest verb is past
        ("We're going to run the race on 14 March!", date(2027, 3, 14)),
        ("I ran the race on 14 March.", date(2026, 3, 14)),
        ("I'm flying to Porto in December", date(2026, 12, 1)),  # this month is not past
        # said on Wednesday 25 November 2026
        ("I will see her on Friday.", date(2026, 11, 27)),  # a plan: the coming Friday
        ("I saw her on Friday.", date(2026, 11, 20)),
        ("We are meeting next Friday.", date(2026, 11, 27)),  # the coming one, whatever the tense
        ("We met next Friday's speaker.", date(2026, 11, 27)),
        ("Last Friday I will never forget.", date(2026, 11, 20)),
        ("I will be running a marathon in spring.", date(2027, 3, 1)),
        ("I ran a marathon in spring.", date(2026, 3, 1)),
        ("We're going to Lisbon in the autumn", date(2026, 9, 1)),  # the autumn in progress
        ("I am starting the new job in January.", date(2027, 1, 1)),
    ],
)
def test_a_bare_date_in_a_plan_is_the_next_one(text: str, start: date) -> None:
    said = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    (found,) = extract_event_times(text, said)
    assert found.start.date() == start

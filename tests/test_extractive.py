"""The extractive writer: pure functions on plain data, and the Writer protocol over them."""

from __future__ import annotations

import inspect
import random
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.apps.datasets import locomo_turns
from memstream.consumers import extractive as ex
from memstream.consumers.extractive import (
    ExtractiveWriter,
    anchor,
    centrality,
    classify,
    durative,
    episodes,
    facts,
    is_question,
    is_trivial,
    profile,
    render,
    sentences,
    split_sentences,
    summary,
)
from memstream.consumers.extractive import digests as ex_digests
from memstream.consumers.extractive.sentences import split_items
from memstream.consumers.extractive.statements import read_statement, statement_list
from memstream.consumers.extractive.summaries import retitled
from memstream.consumers.writer import (
    EpisodeDraft,
    FactDraft,
    ProfileRequest,
    Scope,
    Source,
    SummaryRequest,
    Writer,
    Written,
    stamp,
    stamp_of,
)
from memstream.core.dates import MONTH_NAMES, format_date, render_interval
from memstream.core.semantic_time import extract_event_times
from memstream.core.units import build_unit
from memstream.schemas.events import EventTime
from memstream.schemas.memory import FactType, Memory, MemoryKind, Triple

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"
UTC_ZONE = ZoneInfo("UTC")
SCOPE = Scope("locomo", "conv-26", UTC_ZONE)
MON = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)  # Monday 8 May 2023, LoCoMo's first session
THU = datetime(2023, 5, 25, 13, 14, tzinfo=UTC)
FRI = datetime(2023, 6, 9, 19, 55, tzinfo=UTC)

# Relative expressions the semantic-time extractor resolves: none may appear without its date.
RELATIVE = re.compile(
    r"\b(?:yesterday|tomorrow|tonight|last (?:night|week|weekend|month|year|summer|winter|spring|"
    r"Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)|next (?:week|weekend|month|year|summer)|"
    r"this (?:weekend|week|month|year|summer)|(?:\d+|an?|one|two|three|four|five|six|a few|a couple of) "
    r"(?:days?|weeks?|months?|years?) ago)\b",
    re.IGNORECASE,
)


def bare_relatives(text: str) -> list[str]:
    return [m.group() for m in RELATIVE.finditer(text) if not text[m.end() :].startswith(" (")]


def unit(uid: str, ts: datetime, *lines: tuple[str, str]) -> Source:
    """A unit as consumers build it: ``speaker: content`` lines, event times from the extractor."""
    text = "\n".join(f"{speaker}: {content}" for speaker, content in lines)
    content = " ".join(c for _, c in lines)
    return Source(uid, ts, text, (uid,), tuple(extract_event_times(content, ts)))


def memory_source(mid: str, ts: datetime, text: str) -> Source:
    return Source(mid, ts, text, (), start=ts - timedelta(hours=1), end=ts)


def fact_memory(mid: str, subject: str, predicate: str, obj: str, expired: bool = False) -> Memory:
    return Memory(
        memory_id=mid,
        tenant="locomo",
        user_id="conv-26",
        kind=MemoryKind.FACT,
        level=1,
        text=f"{subject} {predicate} {obj}",
        start=MON - timedelta(days=30),
        end=None,
        recorded_at=MON - timedelta(days=30),
        expired_at=MON - timedelta(days=1) if expired else None,
        triple=Triple(subject=subject, predicate=predicate, object=obj),
        fact_type=FactType.ENTITY_RELATION,
        extractive=True,
        writer="extractive@1",
    )


SESSION_1 = [
    unit("u01", MON, ("Caroline", "Hey Mel! Good to see you! How have you been?")),
    unit("u02", MON + timedelta(seconds=30), ("Melanie", "Hey Caroline! I'm swamped with the kids & work.")),
    unit(
        "u03",
        MON + timedelta(minutes=1),
        ("Caroline", "I went to the LGBTQ support group yesterday and it was so powerful."),
    ),
    unit("u04", MON + timedelta(minutes=2), ("Melanie", "Wow, that's cool, Caroline! What happened?")),
    unit(
        "u05",
        MON + timedelta(minutes=3),
        ("Caroline", "The support group made me feel accepted and gave me courage to embrace myself."),
    ),
    unit("u06", MON + timedelta(minutes=4), ("Melanie", "Yeah, I painted that lake sunrise last year!")),
    unit("u07", MON + timedelta(minutes=5), ("Caroline", "I love painting sunsets with watercolours.")),
    unit("u08", MON + timedelta(minutes=6), ("Melanie", "Thanks, Caroline! Talk to you soon!")),
]
SESSION_2 = [
    unit(
        "u11",
        THU,
        ("Melanie", "I ran a charity race for mental health last Saturday – it was really rewarding."),
    ),
    unit("u12", THU + timedelta(minutes=1), ("Melanie", "We're thinking about going camping next month.")),
    unit(
        "u13",
        THU + timedelta(minutes=2),
        ("Caroline", "I'm researching adoption agencies because I want to give kids a loving home."),
    ),
    unit(
        "u14",
        THU + timedelta(minutes=3),
        ("Caroline", "My friend Anna helped me find an LGBTQ-friendly agency."),
    ),
]
SESSION_3 = [
    unit("u21", FRI, ("Caroline", "I moved to Boston last week for a counseling job.")),
    unit(
        "u22",
        FRI + timedelta(minutes=1),
        ("Melanie", "My kids are so excited about summer break this weekend!"),
    ),
    unit(
        "u23",
        FRI + timedelta(minutes=2),
        ("Caroline", "I started volunteering at a youth center two weeks ago."),
    ),
]
ALL_UNITS = SESSION_1 + SESSION_2 + SESSION_3


# --- sentences --------------------------------------------------------------------------------------------


def test_split_sentences_keeps_abbreviations_and_drops_photo_captions() -> None:
    text = "I met Dr. Smith today! It was great. [shares a photo: a lake at sunrise] Wow."
    assert split_sentences(text) == ["I met Dr. Smith today!", "It was great.", "Wow."]


@pytest.mark.parametrize(
    ("text", "trivial"),
    [
        ("Hey Mel! Good to see you!", True),
        ("Thanks, Caroline! Talk to you soon!", True),
        ("Thanks for the support and encouragement.", True),
        ("Wow, that's cool, Caroline!", True),
        ("That's great, Mel!", True),
        ("Hey Caroline, since we last chatted, I've had a lot going on.", False),
        ("Yeah, I painted that lake sunrise last year!", False),
        ("I went to a support group.", False),
    ],
)
def test_small_talk_is_trivial(text: str, trivial: bool) -> None:
    assert is_trivial(text) is trivial


def test_questions() -> None:
    assert is_question("What kinda jobs are you thinkin' of?")
    assert not is_question("I wonder about it.")


def test_unit_sentences_carry_speaker_time_and_resolved_expressions() -> None:
    got = sentences([SESSION_1[2], SESSION_1[1]], UTC_ZONE)  # given out of order
    assert [(s.speaker, s.source_id) for s in got] == [
        ("Melanie", "u02"),
        ("Melanie", "u02"),
        ("Caroline", "u03"),
    ]
    went = got[2]
    assert [e.expression for e in went.events] == ["yesterday"]
    assert went.anchored == "I went to the LGBTQ support group yesterday (7 May 2023) and it was so powerful."


def test_continuation_lines_keep_their_speaker() -> None:
    source = Source("u", MON, "Caroline: I went hiking.\nIt was a long trail up the mountain.", ("u",))
    assert [s.speaker for s in sentences([source], UTC_ZONE)] == ["Caroline", "Caroline"]


def test_only_a_units_own_speakers_open_a_line_and_a_caption_never_does() -> None:
    text = "Nate: Look at my turtles!\n[shares a photo: a turtle]\nMel: this line is Nate's too.\nJo: Cute."
    with_speakers = Source("u", MON, text, ("u",), speakers=("Nate", "Jo"))
    assert [s.speaker for s in sentences([with_speakers], UTC_ZONE)] == ["Nate", "Nate", "Jo"]
    parsed = Source("u", MON, text, ("u",))  # built by hand, no speakers: parsed, but a caption is none
    assert [s.speaker for s in sentences([parsed], UTC_ZONE)] == ["Nate", "Mel", "Jo"]


def test_a_passthrough_day_or_week_takes_its_own_header() -> None:
    session = "Session on 8 May 2023 (Caroline, Melanie):\nOn 8 May 2023, Caroline: I went hiking."
    assert retitled(session, MemoryKind.DAY, MON, UTC_ZONE) == (
        "Day 8 May 2023:\nOn 8 May 2023, Caroline: I went hiking."
    )
    assert retitled("Day 8 May 2023:", MemoryKind.WEEK, MON, UTC_ZONE) == "Week of 8 May 2023:"
    plain = "Caroline went hiking on 8 May 2023."  # the LLM writer's: no header to replace
    assert retitled(plain, MemoryKind.DAY, MON, UTC_ZONE) == plain


def test_memory_sentences_are_read_back_with_their_date_and_speaker() -> None:
    text = (
        "Day 8 May 2023:\nOn 8 May 2023, Caroline: I went to the group yesterday (7 May 2023). "
        "Melanie: I painted a lake. On 9 May 2023, Caroline: I love painting."
    )
    got = sentences([memory_source("m", MON + timedelta(days=2), text)], UTC_ZONE)
    assert [(s.speaker, s.text, s.ts.day) for s in got] == [
        ("Caroline", "I went to the group yesterday (7 May 2023).", 8),
        ("Melanie", "I painted a lake.", 8),
        ("Caroline", "I love painting.", 9),
    ]
    assert all(s.events == () for s in got)  # memories are never re-anchored


def test_lower_case_speaker_labels_are_read_back() -> None:
    text = "Session on 6 January 2025 (user-7, assistant):\n"
    text += "On 6 January 2025, user-7: I ran 5k. assistant: Nice pace."
    got = sentences([memory_source("m", MON, text)], UTC_ZONE)
    assert [(s.speaker, s.text) for s in got] == [("user-7", "I ran 5k."), ("assistant", "Nice pace.")]


# --- dates ------------------------------------------------------------------------------------------------


def one_event(text: str, when: datetime = MON) -> EventTime:
    found = extract_event_times(text, when)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize(
    ("text", "when", "label"),
    [
        ("yesterday", MON, "7 May 2023"),
        ("last Saturday", THU, "20 May 2023"),
        ("last week", MON, "the week of 1 May 2023"),
        ("last weekend", MON, "the weekend of 6–7 May 2023"),
        ("this weekend", FRI, "the weekend of 10–11 June 2023"),
        ("next month", THU, "June 2023"),
        ("last month", datetime(2023, 1, 10, tzinfo=UTC), "December 2022"),
        ("a few months ago", MON, "January–March 2023"),
        ("last summer", MON, "summer 2022"),
        ("this winter", datetime(2023, 1, 15, tzinfo=UTC), "winter 2022–2023"),
        ("last year", MON, "2022"),
        ("three years ago", FRI, "2020"),
        ("a few days ago", MON, "4–6 May 2023"),
        ("the past two weeks", MON, "24 April – 8 May 2023"),
        ("two hours ago", MON, "8 May 2023"),
    ],
)
def test_render_interval(text: str, when: datetime, label: str) -> None:
    assert render_interval(one_event(text, when), UTC_ZONE) == label


def test_dates_are_rendered_in_the_scopes_zone() -> None:
    tokyo = ZoneInfo("Asia/Tokyo")
    late = datetime(2023, 5, 8, 23, 30, tzinfo=UTC)  # already Tuesday 9 May in Tokyo
    said = late.astimezone(tokyo)
    [s] = sentences([unit("u", said, ("Caroline", "I went to the support group yesterday."))], tokyo)
    assert render(s, tokyo) == "On 9 May 2023, Caroline: I went to the support group yesterday (8 May 2023)."
    # An interval computed in another zone is still named by the day it means.
    assert render_interval(one_event("yesterday", said), ZoneInfo("America/New_York")) == "8 May 2023"


def test_anchor_is_idempotent_and_leaves_explicit_dates_alone() -> None:
    events = extract_event_times("I went yesterday, back in 2022 I went too.", MON)
    once = anchor("I went yesterday, back in 2022 I went too.", events, UTC_ZONE)
    assert once == "I went yesterday (7 May 2023), back in 2022 I went too."
    assert anchor(once, events, UTC_ZONE) == once


def test_anchor_marks_every_occurrence() -> None:
    events = [one_event("yesterday")]
    assert anchor("Yesterday was fun; yesterday I ran.", events, UTC_ZONE) == (
        "Yesterday (7 May 2023) was fun; yesterday (7 May 2023) I ran."
    )


# --- centrality -------------------------------------------------------------------------------------------


def test_centrality_prefers_the_sentence_sharing_the_most_vocabulary() -> None:
    texts = [
        "The support group met at the community centre.",
        "The support group was welcoming.",
        "I like bananas.",
        "The community centre hosts the support group weekly.",
    ]
    scores = centrality(texts)
    assert scores == centrality(texts)
    assert min(range(4), key=lambda i: scores[i]) == 2
    assert centrality([]) == []
    assert centrality(["the and of", "it is"]) == [0.0, 0.0]  # no content word at all


# --- episodes ---------------------------------------------------------------------------------------------


def test_episodes_split_at_long_gaps_and_anchor_dates() -> None:
    drafts = episodes(SCOPE, list(reversed(ALL_UNITS)), None)
    assert [d.covers_ids for d in drafts] == [
        tuple(u.id for u in SESSION_1),
        tuple(u.id for u in SESSION_2),
        tuple(u.id for u in SESSION_3),
    ]
    first = drafts[0]
    assert first.text.startswith("On 8 May 2023, ")
    assert "Caroline: I went to the LGBTQ support group yesterday (7 May 2023)" in first.text
    assert "Hey Mel" not in first.text and "Talk to you soon" not in first.text
    assert first.start == datetime(2022, 1, 1, tzinfo=UTC_ZONE)  # "last year" is part of its time
    assert first.end == SESSION_1[-1].ts
    for d in drafts:
        assert not bare_relatives(d.text), d.text
        assert len(ex.split_sentences(d.text)) <= ex.EPISODE_SENTENCES


def test_at_most_three_episodes() -> None:
    far = [
        unit(f"u{i}", MON + timedelta(days=10 * i), ("Caroline", f"I hiked trail number {i} today."))
        for i in range(6)
    ]
    drafts = episodes(SCOPE, far, None)
    assert len(drafts) == ex.MAX_EPISODES
    assert sorted(i for d in drafts for i in d.covers_ids) == sorted(u.id for u in far)
    # the two largest gaps are cut (all equal here: the earliest ones)
    assert [len(d.covers_ids) for d in drafts] == [1, 1, 4]


def test_episode_is_capped_and_in_time_order() -> None:
    many = [
        unit(
            f"u{i:02}",
            MON + timedelta(minutes=i),
            ("Caroline", f"I practised the violin piece number {i} for the recital."),
        )
        for i in range(30)
    ]
    [draft] = episodes(SCOPE, many, None)
    said = [int(n) for n in re.findall(r"number (\d+)", draft.text)]
    assert said == sorted(said)
    assert len(said) <= ex.EPISODE_SENTENCES
    assert len(draft.text.split()) <= ex.EPISODE_WORDS + 10 * ex.EPISODE_SENTENCES


def test_merge_returns_one_episode_extending_the_existing_one() -> None:
    existing = Source(
        "ep1",
        MON,
        "On 8 May 2023, Caroline: I went to the LGBTQ support group yesterday (7 May 2023).",
        ("u03",),
        start=datetime(2023, 5, 7, tzinfo=UTC),
        end=MON,
    )
    [merged] = episodes(SCOPE, SESSION_2, existing)
    assert merged.text.startswith(existing.text + " On 25 May 2023, ")
    assert merged.covers_ids == tuple(u.id for u in SESSION_2)
    assert merged.start == datetime(2023, 5, 7, tzinfo=UTC)
    assert merged.end == datetime(2023, 7, 1, tzinfo=UTC)  # "next month" said in May
    # merging the same units again adds nothing new
    again = Source("ep1", THU, merged.text, (), start=merged.start, end=merged.end)
    assert episodes(SCOPE, SESSION_2, again)[0].text == merged.text


def test_merge_stays_bounded() -> None:
    existing = Source(
        "ep", MON, "On 8 May 2023, Caroline: " + "I walked along the river. " * 40, (), start=MON, end=MON
    )
    many = [
        unit(
            f"n{i}",
            THU + timedelta(minutes=i),
            ("Caroline", f"I cooked a new recipe called dish {i} tonight."),
        )
        for i in range(20)
    ]
    [merged] = episodes(SCOPE, many, existing)
    assert len(merged.text) <= ex.MERGED_MAX_CHARS
    assert merged.text.startswith(existing.text.rstrip())
    assert "dish" in merged.text[len(existing.text) - 1 :]
    # an episode already past the bound still takes the single most central new sentence
    huge = Source("ep", MON, "Caroline: " + "I walked along the river. " * 80, (), start=MON, end=MON)
    [grown] = episodes(SCOPE, many, huge)
    assert grown.text.count("dish") == 1


def test_no_units_no_episodes() -> None:
    assert episodes(SCOPE, [], None) == []


# --- facts ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fact_type", "predicate", "obj"),
    [
        (
            "I love painting sunsets with watercolours.",
            FactType.PREFERENCE,
            "loves",
            "painting sunsets with watercolours",
        ),
        (
            "I'm allergic to peanuts and shellfish.",
            FactType.PREFERENCE,
            "is allergic to",
            "peanuts and shellfish",
        ),
        ("I can't stand loud concerts.", FactType.PREFERENCE, "can't stand", "loud concerts"),
        (
            "My favourite book is Charlotte's Web.",
            FactType.PREFERENCE,
            "favourite book is",
            "Charlotte's Web",
        ),
        (
            "I'm going to start pottery classes next week.",
            FactType.USER_EVENT,
            "plans to",
            "start pottery classes",
        ),
        ("We're thinking about going camping next month.", FactType.USER_EVENT, "plans on", "going camping"),
        (
            "Gonna continue my edu and check out career options!",
            FactType.USER_EVENT,
            "plans to",
            "continue their edu and check out career options",
        ),
        (
            "I'd love to support those with similar issues.",
            FactType.USER_EVENT,
            "wants to",
            "support those with similar issues",
        ),
        ("My sister Anna is visiting.", FactType.ENTITY_RELATION, "has sister", "Anna"),
        ("I have a dog named Max.", FactType.ENTITY_RELATION, "has dog", "Max"),
        ("I live in Chicago with my partner.", FactType.ENTITY_RELATION, "lives in", "Chicago"),
        ("I'm a single parent of two kids.", FactType.ENTITY_RELATION, "is", "a single parent of two kids"),
        ("Now I live in Boston.", FactType.TIME_UPDATE, "lives in", "Boston"),
        ("I moved to Boston last week for a counseling job.", FactType.TIME_UPDATE, "moved to", "Boston"),
        ("I quit my job at the bakery.", FactType.TIME_UPDATE, "quit", "their job at the bakery"),
        (
            "I went to the LGBTQ support group yesterday and it was so powerful.",
            FactType.USER_EVENT,
            "went to",
            "the LGBTQ support group",
        ),
        ("Yeah, I painted that lake sunrise last year!", FactType.USER_EVENT, "painted", "that lake sunrise"),
        (
            "I'm carving out some me-time each day.",
            FactType.USER_EVENT,
            "is carving out",
            "some me-time each day",
        ),
        ("I've been to Paris twice.", FactType.USER_EVENT, "has been to", "Paris twice"),
        ("I have two kids.", FactType.ENTITY_RELATION, "has", "two kids"),
        ("I've got a dog and a cat.", FactType.ENTITY_RELATION, "has", "a dog"),
        ("My kids are so excited about summer break!", FactType.ENTITY_RELATION, "has", "kids"),
    ],
)
def test_classify(text: str, fact_type: FactType, predicate: str, obj: str) -> None:
    expressions = [e.expression for e in extract_event_times(text, MON)]
    assert classify(text, expressions) == ex.Claim(fact_type, predicate, obj)


@pytest.mark.parametrize(
    "text",
    [
        "What kinda jobs are you thinking of?",
        "I think so.",
        "I totally agree, Melanie.",
        "I was so happy and thankful for all the support.",
        "That's really cool.",
        "I'm a bit tired today.",
        "I love that!",
        "I didn't go.",
        "I painted this after the storm.",  # an object that names nothing
        "I love your painting!",  # about the other speaker
        "I'm really thankful for my friends, family and mentors' support.",  # not who they are
    ],
)
def test_classify_ignores_what_says_nothing_about_the_speaker(text: str) -> None:
    assert classify(text) is None


@pytest.mark.parametrize(
    ("text", "predicate", "obj"),
    [
        (
            "I painted this after I visited a LGBTQ center.",
            "visited",
            "a LGBTQ center",
        ),  # not "this after..."
        ("I made a risotto and the whole family loved it.", "made", "a risotto"),  # the next clause cut
        ("I love running my own studio.", "loves", "running their own studio"),  # third person
        ("I love the book that my mom gave me.", "loves", "the book"),
        ("We're allergic to peanuts and shellfish.", "is allergic to", "peanuts and shellfish"),
        (
            "I'm passionate about dance and fashion so combining them is fun.",
            "is passionate about",
            "dance and fashion",
        ),
        ("I'm helping build a kinder world is the goal.", "is helping", "build a kinder world"),
    ],
)
def test_objects_are_one_clean_third_person_phrase(text: str, predicate: str, obj: str) -> None:
    claim = classify(text)
    assert claim is not None and (claim.predicate, claim.object) == (predicate, obj)


@pytest.mark.parametrize(
    ("text", "phatic"),
    [
        ("Let's plan something special!", True),
        ("It means a lot to share this with you.", True),
        ("Life's tough but it's worth it.", True),
        ("Wow, Caroline, that painting is awesome!", True),  # an address, not a name
        ("Thanks, Caroline!", True),
        ("I went to a support group.", False),  # a claim
        ("The support group meets at the community centre downtown.", False),  # names things
        ("We met Anna there.", False),  # a name
        ("It was 5 degrees.", False),  # a number
    ],
)
def test_phatic_sentences_name_nothing(text: str, phatic: bool) -> None:
    assert ex.is_phatic(text) is phatic


def test_episodes_drop_phatic_sentences_and_name_each_speaker_once_per_run() -> None:
    chat = [
        unit("a", MON, ("Caroline", "It means a lot to share this with you.")),
        unit("b", MON + timedelta(minutes=1), ("Caroline", "I adopted a cat named Luna last week.")),
        unit("c", MON + timedelta(minutes=2), ("Melanie", "Let's plan something special!")),
        unit("d", MON + timedelta(minutes=3), ("Caroline", "Luna sleeps on my guitar case.")),
        unit("e", MON + timedelta(minutes=4), ("Melanie", "My son Tom started school in Porto.")),
    ]
    [draft] = episodes(SCOPE, chat, None)
    assert draft.text == (
        "On 8 May 2023, Caroline: I adopted a cat named Luna last week (the week of 1 May 2023). "
        "Luna sleeps on my guitar case. Melanie: My son Tom started school in Porto."
    )
    assert draft.sentence_turn_ids == (("b",), ("d",), ("e",))  # read back with the speaker carried on
    # Small talk alone is no episode: recalled, "Let's plan something special!" would crowd out turns
    # that say something. Merged into an episode, it leaves the text as it was.
    only_small_talk = chat[:1] + chat[2:3]
    assert episodes(SCOPE, only_small_talk, None) == []
    existing = Source("ep1", MON, draft.text, ("b", "d", "e"), start=MON, end=MON)
    [merged] = episodes(SCOPE, only_small_talk, existing)
    assert merged.text == draft.text and merged.covers_ids == ("a", "c") and merged.source_ids == ()


def draft_for(units: list[Source]) -> EpisodeDraft:
    ids = tuple(u.id for u in units)
    return EpisodeDraft("x", units[0].ts, units[-1].ts, source_ids=ids, covers_ids=ids)


def test_facts_are_time_scoped_triples_named_after_the_speaker() -> None:
    got = {f.triple.predicate: f for f in facts(SCOPE, draft_for(ALL_UNITS), ALL_UNITS, [])}
    went = got["went to"]
    assert went.triple == Triple(subject="Caroline", predicate="went to", object="the LGBTQ support group")
    assert went.fact_type is FactType.USER_EVENT
    assert went.sentence == "Caroline went to the LGBTQ support group (7 May 2023)."
    assert (went.valid_from, went.valid_to) == (
        datetime(2023, 5, 7, tzinfo=UTC),
        datetime(2023, 5, 8, tzinfo=UTC),
    )
    assert went.source_ids == ("u03",)
    loves = got["loves"]
    assert (loves.fact_type, loves.valid_from, loves.valid_to) == (FactType.PREFERENCE, SESSION_1[6].ts, None)
    assert loves.sentence == "Caroline loves painting sunsets with watercolours (since 8 May 2023)."
    assert got["moved to"].sentence == "Caroline moved to Boston (the week of 29 May 2023)."
    assert got["has friend"].sentence == "Caroline has friend Anna (since 25 May 2023)."
    camping = got["plans on"]
    assert camping.sentence == "Melanie plans on going camping (June 2023)."
    assert camping.triple.subject == "Melanie"
    assert (camping.valid_from, camping.valid_to) == (datetime(2023, 6, 1, tzinfo=UTC), None)  # a plan: open
    assert got["has friend"].triple.object == "Anna"
    assert got["ran"].valid_to == datetime(2023, 5, 21, tzinfo=UTC)
    assert got["moved to"].valid_to is None  # a state that still holds
    for f in got.values():
        assert not bare_relatives(f.sentence)
        assert f.triple.subject in {"Caroline", "Melanie"}
        assert "?" not in f.sentence


def test_an_assistant_is_not_a_subject() -> None:
    chat = [
        unit("a", MON, ("user-7", "I joined a running club last week."), ("assistant", "I love that idea!")),
        unit("b", MON + timedelta(minutes=1), ("assistant", "I recommend stretching before the intervals.")),
    ]
    got = facts(SCOPE, draft_for(chat), chat, [])
    assert [(f.triple.subject, f.triple.predicate) for f in got] == [("user-7", "joined")]


def test_facts_only_from_the_episodes_units_and_capped() -> None:
    got = facts(SCOPE, draft_for(SESSION_2), ALL_UNITS, [])
    assert {f.source_ids[0] for f in got} <= {u.id for u in SESSION_2}
    chatty = [
        unit(f"c{i:02}", MON + timedelta(minutes=i), ("Caroline", f"I visited museum number {i} downtown."))
        for i in range(30)
    ]
    assert len(facts(SCOPE, draft_for(chatty), chatty, [])) == ex.MAX_FACTS


def test_facts_skip_known_and_repeated_triples() -> None:
    twice = [
        unit("a", MON, ("Caroline", "I love painting sunsets.")),
        unit("b", MON + timedelta(minutes=1), ("Caroline", "I love painting sunsets!")),
        unit("c", MON + timedelta(minutes=2), ("Caroline", "I adopted a cat named Luna.")),
    ]
    got = facts(SCOPE, draft_for(twice), twice, [])
    assert [f.triple.normalized() for f in got].count("caroline|loves|painting sunsets") == 1
    known = fact_memory("m1", "Caroline", "Loves", "painting  sunsets")
    assert all(f.triple.predicate != "loves" for f in facts(SCOPE, draft_for(twice), twice, [known]))


def test_a_time_update_supersedes_current_facts_in_the_same_slot() -> None:
    related = [
        fact_memory("lives", "Caroline", "lives in", "New York"),
        fact_memory("old", "Caroline", "lives in", "Chicago", expired=True),
        fact_memory("pet", "Caroline", "has dog", "Max"),
        fact_memory("other", "Melanie", "lives in", "Denver"),
        fact_memory("work", "Caroline", "works at", "the bakery"),
        fact_memory("pottery", "Caroline", "started", "pottery classes"),
    ]
    got = {f.triple.predicate: f for f in facts(SCOPE, draft_for(SESSION_3), SESSION_3, related)}
    moved = got["moved to"]
    assert moved.fact_type is FactType.TIME_UPDATE
    assert moved.supersedes == ("lives",)
    assert moved.valid_from == datetime(2023, 5, 29, tzinfo=UTC)  # the week of 29 May
    # one can start many things: "started" is not a single-valued slot
    started = got["started"]
    assert (started.fact_type, started.triple.object, started.supersedes) == (
        FactType.TIME_UPDATE,
        "volunteering at a youth center",
        (),
    )


# --- Temporal Memory Tree ---------------------------------------------------------------------------------


def test_session_summary_says_who_did_what_in_the_third_person() -> None:
    written = summary(SCOPE, SummaryRequest(MemoryKind.SESSION, MON, MON + timedelta(hours=1), SESSION_1, []))
    assert written.text.split("\n") == [
        "Session on 8 May 2023 (Caroline, Melanie):",
        "Caroline went to the LGBTQ support group on 7 May. The support group made Caroline feel accepted "
        "and gave them courage to embrace themselves. Caroline loves painting sunsets with watercolours.",
        "Melanie painted that lake sunrise in 2022!",
    ]  # one line per speaker; greetings, questions, reactions and "it was so powerful" left out; a time
    # said as its date (the year only when it is not the node's); the speaker named once a sentence
    assert written.sentence_turn_ids == (("u03",), ("u05",), ("u07",), ("u06",))
    assert not bare_relatives(written.text)


def test_day_and_week_summaries_tell_the_turns_below_them() -> None:
    sessions = [
        memory_source(
            f"s{i}",
            part[-1].ts,
            summary(SCOPE, SummaryRequest(MemoryKind.SESSION, part[0].ts, part[-1].ts, part, [])).text,
        )
        for i, part in enumerate([SESSION_1, SESSION_2, SESSION_3])
    ]
    day = summary(
        SCOPE, SummaryRequest(MemoryKind.DAY, MON, THU, sessions[:2], [], SESSION_1 + SESSION_2)
    ).text
    assert day.startswith("Day 8 May 2023:\nCaroline went to the LGBTQ support group")
    assert len(day.split("\n")) == 3  # a line per speaker, both sessions in it
    assert "Melanie ran a charity race for mental health on 20 May." in day
    week = summary(SCOPE, SummaryRequest(MemoryKind.WEEK, MON, FRI, sessions, [], ALL_UNITS))
    lines = week.text.split("\n")
    assert lines[0] == "Week of 8 May 2023:"
    assert [line[: len("On 25 May 2023, ")] for line in lines[1:]] == [
        "On 8 May 2023, C", "On 8 May 2023, M", "On 25 May 2023, ", "On 25 May 2023, ", "On 9 June 2023, ",
        "On 9 June 2023, ",
    ]  # fmt: skip
    assert "On 9 June 2023, Caroline moved to Boston in the week of 29 May" in week.text
    assert not bare_relatives(week.text)
    # without the turns below it, a day quotes its children's sentences
    assert summary(SCOPE, SummaryRequest(MemoryKind.DAY, MON, THU, sessions[:2], [])).text.startswith(
        "Day 8 May 2023:\n"
    )


def test_a_session_of_small_talk_only_quotes_it() -> None:
    chat = [SESSION_1[0], SESSION_1[3]]  # a greeting and a reaction: nothing to tell
    assert summary(SCOPE, SummaryRequest(MemoryKind.SESSION, MON, MON, chat, [])).text.startswith(
        "Session on 8 May 2023 (Caroline, Melanie):\nOn 8 May 2023, "
    )


def test_summary_avoids_repeating_the_latest_history() -> None:
    children = SESSION_1 + SESSION_2
    first = summary(SCOPE, SummaryRequest(MemoryKind.DAY, MON, THU, children, [])).text
    history = [
        memory_source("h", MON, first),
        memory_source("older", MON - timedelta(days=7), "Caroline: Hi."),
    ]
    second = summary(SCOPE, SummaryRequest(MemoryKind.DAY, MON, THU, children, history)).text

    def said(text: str) -> set[str]:
        return {re.sub(r"^On [^,]+, ", "", s) for s in split_sentences(text.split("\n")[1])}

    assert said(first) and said(second)
    assert not said(first) & said(second)
    # when everything was said already, it still says something
    only = [SESSION_1[2]]
    said = summary(SCOPE, SummaryRequest(MemoryKind.SESSION, MON, MON, only, [])).text
    assert (
        summary(
            SCOPE, SummaryRequest(MemoryKind.SESSION, MON, MON, only, [memory_source("h", MON, said)])
        ).text
        == said
    )


def test_profile_states_each_persons_traits_once_with_updates_and_the_previous_lines() -> None:
    previous = memory_source(
        "p",
        MON - timedelta(days=20),
        "Profile as of April 2023:\n"
        "Caroline — loves hiking in the mountains (since 3 April 2023); "
        "lives in New York (since 3 April 2023)",
    )
    text = profile(
        SCOPE,
        ProfileRequest(
            datetime(2023, 5, 1, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC), ALL_UNITS, previous
        ),
    ).text
    assert text.split("\n") == [
        "Profile as of May 2023:",
        "Caroline — loves hiking in the mountains (since 3 April 2023); "
        "loves painting sunsets with watercolours (since 8 May 2023); has friend Anna (since 25 May 2023); "
        "lives in New York → Boston (the week of 29 May 2023); "
        "started volunteering at a youth center (the week of 22 May 2023)",
        "Melanie — has kids (since 9 June 2023)",
    ]  # grouped by kind (likes, relations, places, the rest); events such as the support group left out
    # refining with the same month again does not repeat a statement
    again = profile(
        SCOPE,
        ProfileRequest(
            datetime(2023, 5, 1, tzinfo=UTC),
            datetime(2023, 6, 1, tzinfo=UTC),
            ALL_UNITS,
            memory_source("p2", FRI, text),
        ),
    )
    assert again.text == text


def test_profile_notes_a_statement_said_again_on_another_day() -> None:
    twice = [
        unit("a", MON, ("Jon", "I love dancing with my friends.")),
        unit("b", THU, ("Jon", "I love dancing in the rain!")),
        unit("c", FRI, ("Jon", "I love dancing with my friends, always.")),
    ]
    written = profile(SCOPE, ProfileRequest(MON, FRI, twice, None))
    assert written.text == (
        "Profile as of June 2023:\n"
        "Jon — loves dancing in the rain (since 25 May 2023); "
        "loves dancing with their friends (since 8 May 2023, again 9 June 2023)"
    )
    assert written.sentence_turn_ids == (("b",), ("a", "c"))


def test_a_statement_another_says_in_full_is_dropped() -> None:
    plans = [
        unit("a", MON, ("Jon", "I'm gonna make my dreams come true.")),
        unit(
            "b", MON + timedelta(minutes=1), ("Jon", "I'm gonna keep pushing and make my dreams come true.")
        ),
    ]
    [topic, _] = durative(SCOPE, MON, plans)
    assert (
        topic.text
        == "Topic in May 2023:\nJon — plans to keep pushing and make their dreams come true (8 May 2023)"
    )
    assert topic.turn_ids == ("b",)


def test_profile_is_capped_per_person_and_falls_back_to_the_most_central_sentence() -> None:
    likes = [
        unit(f"l{i:02}", MON + timedelta(days=i), ("Caroline", f"I love board game number {i}."))
        for i in range(20)
    ]
    lines = profile(SCOPE, ProfileRequest(MON, MON + timedelta(days=20), likes, None)).text.split("\n")
    assert len(lines) == 2
    said = re.findall(r"number (\d+)", lines[1])
    assert sorted(map(int, said)) == list(range(20 - ex.PROFILE_STATEMENTS, 20))  # the most recent
    plain = [unit("x", MON, ("Caroline", "The support group meets at the community centre downtown."))]
    assert profile(SCOPE, ProfileRequest(MON, MON, plain, None)).text == (
        "Profile as of May 2023:\n"
        "On 8 May 2023, Caroline: The support group meets at the community centre downtown."
    )


def fact_sources(found: Sequence[FactDraft]) -> list[Source]:
    """Facts as the tree hands them to ``durative``: text, triple, type and stated turns."""
    return [
        Source(
            f"f{i}",
            f.valid_from,
            f.sentence,
            f.source_ids,
            start=f.valid_from,
            end=f.valid_to,
            triple=f.triple,
            fact_type=f.fact_type,
        )
        for i, f in enumerate(found)
    ]


def test_durative_topic_and_persona_are_statement_lines() -> None:
    cluster = fact_sources(facts(SCOPE, draft_for(ALL_UNITS), ALL_UNITS, []))
    topic, persona = (w.text for w in durative(SCOPE, datetime(2023, 5, 1, tzinfo=UTC), cluster))
    header, *lines = topic.split("\n")
    assert header == "Topic in May 2023:"
    assert sum(len(split_items(line.split(" — ", 1)[1])) for line in lines) == ex.TOPIC_STATEMENTS
    assert persona.split("\n") == [
        "Persona in May 2023:",
        "Caroline — loves painting sunsets with watercolours (since 8 May 2023); "
        "has friend Anna (since 25 May 2023); moved to Boston (the week of 29 May 2023); "
        "started volunteering at a youth center (the week of 22 May 2023)",
        "Melanie — has kids (since 9 June 2023)",
    ]
    legacy = [memory_source("e", MON, "On 8 May 2023, Caroline: I went to the museum downtown (7 May 2023).")]
    assert durative(SCOPE, MON, legacy)[1].text == (
        "Persona in May 2023:\nCaroline — went to the museum downtown (7 May 2023)"
    )  # no trait: the most central statement


@settings(max_examples=50, deadline=None)
@given(
    st.sampled_from(["Caroline", "user-7", "Mary Ann"]),
    st.sampled_from(["loves", "moved to", "has friend", "favourite book is", "went to"]),
    st.lists(
        st.sampled_from(["the", "old", "Porto", "studio", "Charlotte's", "dance", "x2"]),
        min_size=1,
        max_size=5,
    ),
    st.dates(date(2000, 1, 1), date(2030, 12, 31)),
    st.booleans(),
)
def test_a_statement_line_reads_back_as_written(
    subject: str, predicate: str, words: list[str], said: date, state: bool
) -> None:
    stated = ex.Statement(subject, predicate, " ".join(words), format_date(said), said, None, state, ("t",))
    written = statement_list("Profile as of May 2023:", [stated], 5, MON, UTC_ZONE)
    [back] = sentences([Source("p", MON, written.text, written.turn_ids, start=MON,
                               sentence_turn_ids=written.sentence_turn_ids)], UTC_ZONE)  # fmt: skip
    assert (back.speaker, back.text, back.turn_ids, back.item) == (subject, stated.item, ("t",), True)
    read = read_statement(subject, back.text, MON, back.turn_ids)
    assert read is not None and read.item == stated.item and read.key == stated.key
    sentence = ex.render_statement(stated)
    assert sentence.startswith(subject) and sentence.endswith(f"({stated.note}).")


# --- provenance -------------------------------------------------------------------------------------------


def read_back(text: str) -> list[str]:
    """An output's sentences as a parent reads them back, without dates, speakers and headers."""
    parsed = sentences([Source("out", MON, text, (), start=MON)], UTC_ZONE)
    return [re.sub(r" \([^()]*\)", "", s.text).rstrip(".!?") for s in parsed]


def sayers(text: str, units: list[Source]) -> list[tuple[str, ...]]:
    """Per sentence of ``text``, the turns of the units that say it."""
    return [tuple(t for u in units if body in u.text for t in u.turn_ids) for body in read_back(text)]


# Words the third-person rewrite puts in (observations.third_person_text, digests.compressed).
TOLD_WORDS = {"and", "others", "is", "are", "has", "does", "doesn't", "hasn't", "will", "would", "their"}
TOLD_WORDS |= {"themselves", "want", "wants", "to", "going", "have", "i", "m", "s", "the", "of"}
# ... with pronouns once a sentence named the person, contractions written out (digests.written_out),
# and a relative time said as its date ("on 7 May", "in the week of 1 May": digests.in_words).
TOLD_WORDS |= {"they", "them", "not", "cannot", "had", "because", "am", "on", "in", "week", "weekend"}
TOLD_WORDS |= {m.lower() for m in MONTH_NAMES}


def told_by(text: str, units: list[Source]) -> list[tuple[str, ...]]:
    """Per sentence of a third-person ``text``, the turns of the units that say each of its words (a
    speaker's name, the words the rewrite adds and a verb's -s aside)."""
    names = {sp.lower() for u in units for sp in re.findall(r"^(\w+):", u.text, re.M)}

    def said(u: Source) -> set[str]:
        return third_persons({w.lower() for w in re.findall(r"[^\W\d_]+", u.text)})

    out = []
    for body in read_back(text):
        body = re.sub(r"^On [^,]+, ", "", body)  # a week's line names its day
        wanted = {w.lower() for w in re.findall(r"[^\W\d_]+", body)} - names - TOLD_WORDS
        out.append(tuple(t for u in units if wanted <= said(u) for t in u.turn_ids))
    return out


def stated_by(text: str, units: list[Source]) -> list[tuple[str, ...]]:
    """Per statement of a statement-line ``text``, the turns that end with its object's last word."""
    parsed = sentences([Source("out", MON, text, (), start=MON)], UTC_ZONE)
    assert all(s.item for s in parsed), text
    lasts = [re.sub(r" \([^()]*\)$", "", s.text).split()[-1].lower() for s in parsed]
    return [
        tuple(t for u in units if re.search(rf"\b{re.escape(w)}\b", u.text.lower()) for t in u.turn_ids)
        for w in lasts
    ]


def flat(per_sentence: Sequence[tuple[str, ...]]) -> set[str]:
    return {t for turns in per_sentence for t in turns}


def as_memory(mid: str, written: Written, start: datetime, end: datetime) -> Source:
    return Source(
        mid,
        end,
        written.text,
        written.turn_ids,
        start=start,
        end=end,
        sentence_turn_ids=written.sentence_turn_ids,
    )


def test_an_episode_names_the_turns_of_the_sentences_it_quotes_only() -> None:
    drafts = episodes(SCOPE, ALL_UNITS, None)
    for d in drafts:
        per = sayers(d.text, ALL_UNITS)
        assert all(len(turns) == 1 for turns in per)
        assert list(d.sentence_turn_ids) == per
        assert set(d.source_ids) == flat(per) <= set(d.covers_ids)  # here a unit's id is its turn's
    assert drafts[0].covers_ids == tuple(u.id for u in SESSION_1)
    assert {"u01", "u04", "u08"}.isdisjoint(drafts[0].source_ids)  # greetings and thanks are not quoted


def test_tree_summaries_name_the_turns_they_quote_at_every_level() -> None:
    sessions = []
    for i, part in enumerate([SESSION_1, SESSION_2, SESSION_3]):
        written = summary(SCOPE, SummaryRequest(MemoryKind.SESSION, part[0].ts, part[-1].ts, part, []))
        assert list(written.sentence_turn_ids) == told_by(written.text, part)
        assert set(written.turn_ids) == flat(written.sentence_turn_ids)
        sessions.append(as_memory(f"s{i}", written, part[0].ts, part[-1].ts))
    below = {t for s in sessions for t in s.turn_ids}
    week = summary(SCOPE, SummaryRequest(MemoryKind.WEEK, MON, FRI, sessions, [], ALL_UNITS))
    assert list(week.sentence_turn_ids) == told_by(week.text, ALL_UNITS)
    prof = profile(SCOPE, ProfileRequest(MON, FRI, sessions, None, ALL_UNITS))
    for turns, sayer in zip(prof.sentence_turn_ids, stated_by(prof.text, ALL_UNITS), strict=True):
        assert turns and set(turns) <= set(sayer)
    for written in (week, prof):
        assert set(written.turn_ids) == flat(written.sentence_turn_ids)
    assert set(week.turn_ids) <= {t for u in ALL_UNITS for t in u.turn_ids}
    assert set(prof.turn_ids) < below  # it states a few of the sentences, not all


def test_a_sentence_of_a_memory_without_a_sentence_map_credits_all_its_turns() -> None:
    text = "On 8 May 2023, Caroline: I love hiking in the mountains. I went to the museum downtown."
    unmapped = Source("m", MON, text, ("t1", "t2"), start=MON, end=MON)
    mapped = replace(unmapped, sentence_turn_ids=(("t1",), ("t2",)))
    assert profile(SCOPE, ProfileRequest(MON, THU, [unmapped], None)).turn_ids == ("t1", "t2")
    assert profile(SCOPE, ProfileRequest(MON, THU, [mapped], None)).turn_ids == (
        "t1",
    )  # the hiking line only
    stale = replace(unmapped, sentence_turn_ids=(("t1",),))  # does not match the text: not trusted
    assert profile(SCOPE, ProfileRequest(MON, THU, [stale], None)).turn_ids == ("t1", "t2")
    mapped_profile = profile(SCOPE, ProfileRequest(MON, THU, [mapped], None))
    carried = Source("p", THU, mapped_profile.text, ("t1",), start=MON, end=THU,
                     sentence_turn_ids=mapped_profile.sentence_turn_ids)  # fmt: skip
    assert profile(SCOPE, ProfileRequest(THU, FRI, [], carried)).turn_ids == (
        "t1",
    )  # carried with its own turns


def test_a_merge_keeps_the_episodes_turns_for_its_text_and_names_the_units_it_adds() -> None:
    said = "On 8 May 2023, Caroline: I went to the LGBTQ support group yesterday (7 May 2023)."
    existing = Source("ep1", MON, said, ("u03",), start=datetime(2023, 5, 7, tzinfo=UTC), end=MON)
    [merged] = episodes(SCOPE, SESSION_2, existing)
    assert merged.sentence_turn_ids[0] == ("u03",)
    assert list(merged.sentence_turn_ids[1:]) == sayers(merged.text, SESSION_2)[1:]
    assert set(merged.source_ids) == flat(merged.sentence_turn_ids[1:])


def test_durative_memory_names_the_turns_of_the_facts_it_states() -> None:
    found = facts(SCOPE, draft_for(ALL_UNITS), ALL_UNITS, [])
    cluster = fact_sources(found)
    for written in durative(SCOPE, MON, cluster):
        per = stated_by(written.text, ALL_UNITS)
        assert all(
            len(turns) == 1 and set(turns) <= set(sayer)
            for turns, sayer in zip(written.sentence_turn_ids, per, strict=True)
        )
        assert set(written.turn_ids) == flat(written.sentence_turn_ids)
    topic = durative(SCOPE, MON, cluster)[0]
    assert len(topic.turn_ids) == ex.TOPIC_STATEMENTS < len(cluster)


# --- properties -------------------------------------------------------------------------------------------

POOL = [
    "I went to the LGBTQ support group yesterday and it was so powerful.",
    "Yeah, I painted that lake sunrise last year!",
    "We're thinking about going camping next month.",
    "I ran a charity race for mental health last Saturday.",
    "I love reading fantasy novels on rainy evenings.",
    "My sister Anna is visiting this weekend.",
    "I moved to Boston last week for a new job.",
    "Hey Mel! Good to see you!",
    "Thanks, Caroline!",
    "What kinda jobs are you thinking of?",
    "I'm keen on counseling or working in mental health.",
    "The adoption agency helps LGBTQ folks build families.",
    "Wow, that's cool!",
    "I'm going to start pottery classes next week.",
    "My favourite book is Charlotte's Web.",
    "I started a new job at the library two weeks ago.",
]
# The only words the writer adds: dates, and the headers of summaries, profiles and durative memory;
# statements add their predicates (a said verb in the third person) and "their" for "my".
MONTHS = "january february march april may june july august september october november december"
HEADERS = "on the week of weekend session day profile as topic in persona spring summer autumn winter"
DATE_WORDS = set(f"{MONTHS} {HEADERS}".split())
STATEMENT_WORDS = {"since", "again", "their", "they", "them", "theirs", "themselves", "is", "has"}
STATEMENT_WORDS |= {"plans", "hopes", "wants", "needs"}


def third_persons(words: set[str]) -> set[str]:
    return words | {f"{w}s" for w in words} | {f"{w}es" for w in words} | {f"{w[:-1]}ies" for w in words}


units_strategy = st.lists(
    st.tuples(
        st.integers(0, 40 * 24 * 60),  # minutes after MON
        st.sampled_from(["Caroline", "Melanie"]),
        st.lists(st.sampled_from(POOL), min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=12,
)


def build_units(spec: list[tuple[int, str, list[str]]]) -> list[Source]:
    return [
        unit(f"u{i:02}", MON + timedelta(minutes=m), (speaker, " ".join(said)))
        for i, (m, speaker, said) in enumerate(spec)
    ]


def everything(units: list[Source]) -> list[str]:
    """Every text the writer produces from ``units``."""
    eps = episodes(SCOPE, units, None)
    out = [d.text for d in eps]
    found = [f for d in eps for f in facts(SCOPE, d, units, [])]
    out += [f.sentence for f in found]
    start, end = min(u.ts for u in units), max(u.ts for u in units)
    out.append(summary(SCOPE, SummaryRequest(MemoryKind.SESSION, start, end, units, [])).text)
    out.append(profile(SCOPE, ProfileRequest(start, end, units, None)).text)
    cluster = [memory_source(f"f{i}", f.valid_from, f.sentence) for i, f in enumerate(found)] or units
    out += [w.text for w in durative(SCOPE, start, cluster)]
    return out


@settings(max_examples=25, deadline=None)
@given(units_strategy, st.randoms(use_true_random=False))
def test_outputs_are_deterministic_and_independent_of_input_order(
    spec: list[tuple[int, str, list[str]]], rnd: random.Random
) -> None:
    units = build_units(spec)
    shuffled = list(units)
    rnd.shuffle(shuffled)
    assert everything(units) == everything(shuffled)


@settings(max_examples=25, deadline=None)
@given(units_strategy)
def test_outputs_use_only_input_words_and_are_never_empty(spec: list[tuple[int, str, list[str]]]) -> None:
    units = build_units(spec)
    allowed = {w.lower() for u in units for w in re.findall(r"[^\W\d_]+", u.text)} | DATE_WORDS
    allowed |= third_persons(allowed) | STATEMENT_WORDS | TOLD_WORDS
    outputs = everything(units)
    eps = episodes(SCOPE, units, None)
    assert len(eps) <= ex.MAX_EPISODES
    covered = [i for d in eps for i in d.covers_ids]
    assert len(covered) == len(set(covered)) and set(covered) <= {u.id for u in units}
    assert eps or not ex.substantive(ex.sentences(units, SCOPE.zone))  # none: small talk only
    for text in outputs:
        assert text.strip()
        assert set(w.lower() for w in re.findall(r"[^\W\d_]+", text)) <= allowed, text
        assert not bare_relatives(text), text
    for d in eps:
        assert d.start <= d.end
        assert d.text.split(": ", 1)[1]  # more than a date and a speaker


@settings(max_examples=25, deadline=None)
@given(units_strategy)
def test_outputs_name_a_turn_that_says_each_sentence(spec: list[tuple[int, str, list[str]]]) -> None:
    units = build_units(spec)
    start, end = units[0].ts, units[-1].ts
    outputs: list[tuple[str, tuple[tuple[str, ...], ...], tuple[str, ...]]] = [
        (d.text, d.sentence_turn_ids, d.source_ids) for d in episodes(SCOPE, units, None)
    ]
    w = summary(SCOPE, SummaryRequest(MemoryKind.SESSION, start, end, units, []))
    if w.text.startswith("Session on") and "\nOn " not in w.text:  # told in the third person
        for turns, sayer in zip(w.sentence_turn_ids, told_by(w.text, units), strict=True):
            assert turns and set(turns) <= set(sayer)  # each turn that said it (a repeat is kept once)
        assert set(w.turn_ids) == flat(w.sentence_turn_ids)
    else:  # nothing to tell: quoted
        outputs.append((w.text, w.sentence_turn_ids, w.turn_ids))
    prof = profile(SCOPE, ProfileRequest(start, end, units, None))
    if "\n" in prof.text and " — " in prof.text:  # statements: each names a turn saying its object
        for turns, sayer in zip(prof.sentence_turn_ids, stated_by(prof.text, units), strict=True):
            assert turns and set(turns) <= set(sayer)
        assert set(prof.turn_ids) == flat(prof.sentence_turn_ids)
    else:  # no trait: the most central sentence, quoted
        outputs.append((prof.text, prof.sentence_turn_ids, prof.turn_ids))
    for text, per_sentence, named in outputs:
        said_by = sayers(text, units)
        assert len(per_sentence) == len(said_by)
        for turns, sayer in zip(per_sentence, said_by, strict=True):
            assert len(turns) == 1 and set(turns) <= set(sayer)
        assert set(named) == flat(per_sentence)


@settings(max_examples=25, deadline=None)
@given(units_strategy)
def test_episode_sentences_are_input_sentences(spec: list[tuple[int, str, list[str]]]) -> None:
    units = build_units(spec)
    said = {s for sentence in POOL for s in split_sentences(sentence)}
    for d in episodes(SCOPE, units, None):
        for piece in split_sentences(d.text):
            body = re.sub(r"^(?:On \d+ \w+ \d{4}, )?(?:Caroline|Melanie): ", "", piece)
            assert re.sub(r" \([^()]*\)", "", body) in said


# --- the Writer -------------------------------------------------------------------------------------------


def test_writer_implements_the_protocol() -> None:
    writer: Writer = ExtractiveWriter()
    assert writer.extractive is True
    assert writer.model is None
    assert writer.label("episodes") == writer.label("durative") == "extractive@3"
    methods = {n: m for n, m in inspect.getmembers(Writer, inspect.isfunction) if not n.startswith("_")}
    assert set(methods) == {"label", "episodes", "facts", "summary", "profile", "durative"}
    for name, member in methods.items():
        ours = getattr(ExtractiveWriter, name)
        assert inspect.signature(ours).parameters.keys() == inspect.signature(member).parameters.keys(), name
        assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(member), name


def test_stamp_records_the_writer_and_a_passthrough_keeps_its_childs() -> None:
    writer = ExtractiveWriter()
    assert stamp(writer, "facts") == {"extractive": True, "writer": "extractive@3", "model": None}
    child = Memory(
        memory_id="s", tenant="t", user_id="u", kind=MemoryKind.SESSION, level=2, text="x", start=MON,
        end=MON + timedelta(hours=1), recorded_at=MON, extractive=False, writer="session@2", model="m",
    )  # fmt: skip
    assert stamp_of(child) == {"extractive": False, "writer": "session@2", "model": "m"}
    node = Memory.model_validate({**child.model_dump(), "memory_id": "n", **stamp(writer, "summary")})
    assert (node.extractive, node.writer, node.model) == (True, "extractive@3", None)


async def test_writer_output_makes_valid_memories() -> None:
    writer = ExtractiveWriter()
    drafts = await writer.episodes(SCOPE, ALL_UNITS, None)
    assert drafts == episodes(SCOPE, ALL_UNITS, None)
    common = {
        "tenant": "locomo",
        "user_id": "conv-26",
        "extractive": writer.extractive,
        "model": writer.model,
    }
    for i, d in enumerate(drafts):
        Memory(
            memory_id=f"e{i}", kind=MemoryKind.EPISODE, level=1, text=d.text, start=d.start, end=d.end,
            recorded_at=d.end, source_unit_ids=list(d.source_ids), writer=writer.label("episodes"), **common,
        )  # fmt: skip
        for j, f in enumerate(await writer.facts(SCOPE, d, ALL_UNITS, [])):
            Memory(
                memory_id=f"f{i}.{j}", kind=MemoryKind.FACT, level=1, text=f.sentence, start=f.valid_from,
                end=f.valid_to, recorded_at=d.end, triple=f.triple, fact_type=f.fact_type,
                writer=writer.label("facts"), **common,
            )  # fmt: skip
    text = await writer.summary(SCOPE, SummaryRequest(MemoryKind.SESSION, MON, MON, SESSION_1, []))
    assert text == summary(SCOPE, SummaryRequest(MemoryKind.SESSION, MON, MON, SESSION_1, []))
    assert await writer.profile(SCOPE, ProfileRequest(MON, THU, ALL_UNITS, None)) == profile(
        SCOPE, ProfileRequest(MON, THU, ALL_UNITS, None)
    )
    assert await writer.durative(SCOPE, MON, ALL_UNITS) == durative(SCOPE, MON, ALL_UNITS)


# --- LoCoMo -----------------------------------------------------------------------------------------------


@pytest.mark.skipif(not LOCOMO.exists(), reason="needs ../shared/data/locomo/locomo_dev.json")
async def test_locomo_first_sessions() -> None:
    turns = list(locomo_turns(LOCOMO))
    user = turns[0].user_id
    by_session: dict[str, list[Source]] = {}
    for turn in turns:
        if turn.user_id != user:
            continue
        u = build_unit(turn, UTC_ZONE, extract_event_times)
        by_session.setdefault(u.session_id, []).append(
            Source(u.unit_id, u.ts, u.text, (u.turn_id,), tuple(u.event_times))
        )
    parts = list(by_session.values())[:3]
    units = [u for part in parts for u in part]
    scope = Scope("locomo", user, UTC_ZONE)
    writer = ExtractiveWriter()

    eps = await writer.episodes(scope, units, None)
    assert 1 <= len(eps) <= 3
    found = [f for d in eps for f in await writer.facts(scope, d, units, [])]
    assert found
    sessions = []
    for i, part in enumerate(parts):
        text = (
            await writer.summary(scope, SummaryRequest(MemoryKind.SESSION, part[0].ts, part[-1].ts, part, []))
        ).text
        assert all(text.split("\n")) and text.count("\n") <= 2  # a line per speaker
        sessions.append(memory_source(f"s{i}", part[-1].ts, text))
    week = (
        await writer.summary(
            scope, SummaryRequest(MemoryKind.WEEK, parts[0][0].ts, parts[-1][-1].ts, sessions, sessions[:1])
        )
    ).text
    prof = (
        await writer.profile(scope, ProfileRequest(parts[0][0].ts, parts[-1][-1].ts, sessions, None))
    ).text
    cluster = [memory_source(f"f{i}", f.valid_from, f.sentence) for i, f in enumerate(found)]
    topic, persona = (w.text for w in await writer.durative(scope, parts[0][0].ts, cluster))

    texts = [d.text for d in eps] + [f.sentence for f in found] + [s.text for s in sessions]
    texts += [week, prof, topic, persona]
    for text in texts:
        assert text.strip()
        assert not bare_relatives(text), text
    # the relative expressions LoCoMo's speakers used come out resolved
    joined = "\n".join(texts)
    assert "yesterday (7 May 2023)" in joined
    assert "last year (2022)" in joined
    for f in found:  # dated third-person statements of clean triples
        assert f.sentence.startswith(f.triple.subject) and f.triple.object in f.sentence
        assert re.search(r"\([^()]*\d{4}[^()]*\)\.$", f.sentence), f.sentence
        assert not re.search(r"(?<![\w-])(?:my|i|me|you|your)(?![\w-])", f.triple.object, re.I), f.triple


# --- digests: who did what ----------------------------------------------------------------------------


def test_a_profile_reads_traits_from_the_turns_when_the_weeks_are_told_in_the_third_person() -> None:
    week = summary(SCOPE, SummaryRequest(MemoryKind.WEEK, MON, FRI, [], [], ALL_UNITS))
    weeks = [memory_source("w", FRI, week.text)]
    from_weeks = profile(SCOPE, ProfileRequest(MON, FRI, weeks, None))
    from_turns = profile(SCOPE, ProfileRequest(MON, FRI, weeks, None, ALL_UNITS))
    assert " — " not in from_weeks.text  # "Caroline loves ..." is no first-person claim: no trait found
    assert from_turns == profile(SCOPE, ProfileRequest(MON, FRI, ALL_UNITS, None))
    assert "Caroline — loves painting sunsets with watercolours" in from_turns.text


def test_compressed_drops_fillers_intensifiers_and_a_closing_verdict() -> None:
    assert ex_digests.compressed(
        "Wow, Mel! I went to the support group yesterday and it was so powerful."
    ) == ("I went to the support group yesterday")
    assert (
        ex_digests.compressed("I really love painting sunsets, which is relaxing.")
        == "I love painting sunsets"
    )
    assert ex_digests.compressed("Researching adoption agencies.") == "I'm researching adoption agencies."
    # a participle that is the subject keeps its sentence; a verdict that is all there is stays
    assert (
        ex_digests.compressed("Taking care of ourselves is important.")
        == "Taking care of ourselves is important."
    )
    assert ex_digests.compressed("It was amazing, it was so great.") == "It was amazing, it was so great."
    assert ex_digests.to_listener("You're so brave for sharing that!")
    assert ex_digests.to_listener("Wow, that sounds amazing!")
    assert ex_digests.to_listener("Sounds like a good fit.")
    assert not ex_digests.to_listener("I ran a charity race last Saturday.")


@settings(max_examples=50, deadline=None)
@given(st.sampled_from([s for said in POOL for s in split_sentences(said)]))
def test_compressed_keeps_what_is_said_and_is_stable(text: str) -> None:
    short = ex_digests.compressed(text)
    assert short.strip()
    assert len(short) <= len(text) + len("I'm ")
    assert ex_digests.compressed(short) == ex_digests.compressed(ex_digests.compressed(short))


def test_a_weeks_line_reads_on_after_its_day() -> None:
    since = [unit("s", MON, ("Melanie", "Since we last spoke, the pottery class started and I love it."))]
    week = summary(
        SCOPE, SummaryRequest(MemoryKind.WEEK, MON, FRI, [], [], [*since, SESSION_3[0]])
    ).text.split("\n")
    assert week[1].startswith("On 8 May 2023, since Melanie and others last spoke")  # a function word
    assert week[2].startswith("On 9 June 2023, Caroline moved to Boston")  # a name stays capitalised


def test_chosen_keeps_the_most_specific_within_the_words_without_repeats() -> None:
    told = ex_digests.told(
        SCOPE, [*SESSION_1, replace(SESSION_1[2], id="again", ts=THU, turn_ids=("again",))]
    )
    caroline = [t for t in told if t.said.speaker == "Caroline"]
    kept = ex_digests.chosen(caroline, 10)
    assert sum(len(t.words) for t in kept) <= 10
    assert [t.said.order for t in kept] == sorted(t.said.order for t in kept)
    everything = ex_digests.chosen(caroline, 1000)
    assert len({t.text for t in everything}) == len(everything)  # the repeat on THU is left out
    assert "again" not in {t.said.source_id for t in everything}


def test_a_relative_time_is_said_as_its_date() -> None:
    def said(text: str, when: datetime = MON) -> str:
        return ex_digests.in_words(text, extract_event_times(text, when), when, UTC_ZONE)

    assert said("I went to the support group yesterday.") == "I went to the support group on 7 May."
    assert said("Last week I moved to Boston.") == "in the week of 1 May I moved to Boston."
    assert said("I painted it last year, and since last month.") == "I painted it in 2022, and since April."
    assert said("We met two weekends ago.") == "We met on the weekend of 29–30 April."
    # another year than the one it was said in is named; a vague span keeps its expression, anchored
    new_year = datetime(2023, 1, 2, tzinfo=UTC)
    assert said("Last week I quit.", new_year) == "in the week of 26 December 2022 I quit."
    assert said("I started a few weeks ago.") == "I started a few weeks ago (10–30 April 2023)."
    assert said("Faster than last month's run.") == "Faster than last month (April 2023)'s run."
    assert said("I went on 7 May 2023.") == "I went on 7 May 2023."  # explicit: as said


def test_contractions_are_written_out_and_vocatives_left_out() -> None:
    assert ex_digests.written_out("They're sure it'll work; I'd been there, I'd love to, can't, won't") == (
        "They are sure it will work; I had been there, I would love to, cannot, will not"
    )
    assert ex_digests.unaddressed("Thanks, Jon! It'll work, Jon.", ["Jon", "Gina"]) == "Thanks! It'll work."
    assert ex_digests.unaddressed("Jon, I did it.", ["Jon"]) == "I did it."
    cannot = ex_digests.told(SCOPE, [unit("c", MON, ("Gina", "Can't wait to see the dance festival!"))])
    assert cannot[0].text == "Cannot wait to see the dance festival!"
    assert ex_digests.unaddressed("Jon did it, and Gina too.", ["Jon", "Gina"]) == "Jon did it, and Gina too."


def test_a_session_keeps_a_share_of_each_speakers_words_and_their_own_dated_news_first() -> None:
    pool = ex_digests.told(SCOPE, SESSION_2)
    melanie = [t for t in pool if t.said.speaker == "Melanie"]
    words = sum(len(t.words) for t in melanie)
    low, high = ex_digests.SESSION_WORDS
    assert ex_digests.budget(MemoryKind.SESSION, melanie) == max(
        low, min(high, round(ex_digests.SESSION_SHARE * words))
    )
    assert ex_digests.budget(MemoryKind.DAY, melanie) == ex_digests.SPEAKER_WORDS[MemoryKind.DAY]
    # the speaker's own dated news outweighs a general remark of as many content words
    news = ex_digests.told(
        SCOPE, [unit("n", MON, ("Melanie", "I ran a charity race in Boston on Saturday."))]
    )
    remark = ex_digests.told(SCOPE, [unit("r", MON, ("Melanie", "Charity races help many people."))])
    assert len(news[0].words) == len(remark[0].words) and news[0].weight > remark[0].weight
    assert ex_digests.chosen([*remark, *news], len(news[0].words)) == news

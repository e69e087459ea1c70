"""Observations (memstream.consumers.extractive.observations): a session's informative sentences, third
person, dated, each with its turn; pure functions on plain data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from memstream.consumers.extractive.observations import (
    ObservationDraft,
    observations,
    third_person,
    third_person_text,
)
from memstream.consumers.tree import observation_memories
from memstream.consumers.writer import Scope, Source
from memstream.core.recall.rank import tokens
from memstream.schemas.events import CloseReason, WindowClosed, WindowLevel
from memstream.schemas.memory import MemoryKind

SCOPE = Scope("t", "u", ZoneInfo("UTC"))
T0 = datetime(2022, 6, 3, 14, 0, tzinfo=UTC)


def session(*said: tuple[str, str]) -> list[Source]:
    return [
        Source(
            id=f"u{i}",
            ts=T0 + timedelta(minutes=i),
            text=f"{speaker}: {text}",
            turn_ids=(f"D1:{i}",),
            speakers=(speaker,),
        )
        for i, (speaker, text) in enumerate(said)
    ]


CHAT = session(
    ("Nate", "Hey Joanna! I got my turtles a new tank yesterday, they love it! How are you?"),
    ("Joanna", "Wow, that's great! I'm writing a screenplay about my grandmother's farm in Ohio."),
    ("Nate", "Do you want to come over? We're hosting a gaming tournament next week at my place."),
    ("Joanna", "Thanks, sounds fun!"),
    ("Nate", "Your screenplay idea is brilliant, you should send it to the festival in Toronto."),
)


def test_first_person_becomes_the_speakers_name_and_you_the_other_speaker() -> None:
    assert third_person_text("I love my turtles.", "Nate", "Joanna") == "Nate loves their turtles."
    assert third_person_text("I'm proud of my dog.", "Nate", None) == "Nate is proud of their dog."
    assert third_person_text("My sister visited me.", "Nate", None) == "Nate's sister visited Nate."
    assert third_person_text("I went there with my mom.", "Jo", None) == "Jo went there with their mom."
    assert third_person_text("We're moving; our house sold.", "Jo", None) == (
        "Jo and others are moving; Jo's house sold."
    )
    assert third_person_text("We'll walk the dog; we'd go daily.", "Jo", None) == (
        "Jo and others will walk the dog; Jo and others would go daily."
    )
    assert third_person_text("I wanna see your painting.", "Jo", "Mel") == "Jo wants to see Mel's painting."
    assert third_person_text("I told you so.", "Jo", "Mel") == "Jo told Mel so."
    assert third_person_text("The team you'd join, you'll like it.", "Jo", "Mel") == (
        "The team Mel would join, Mel will like it."
    )
    # with no single addressee, the second person stays as said
    assert third_person_text("You rock.", "Jo", None) == "You rock."
    assert third_person_text("Sam and I", "Jo", None) == "Sam and Jo"
    assert third_person_text("I learnt to accept myself.", "Jo", None) == "Jo learnt to accept themselves."
    assert third_person_text("It made myself proud.", "Jo", None) == "It made Jo proud."
    assert third_person_text("i think i'm done", "Jo", None) == "Jo thinks Jo is done"
    assert third_person_text("See i.e. this", "Jo", None) == "See i.e. this"


def test_a_statement_that_dropped_its_i_gets_the_speaker_as_subject() -> None:
    assert third_person_text("Lost my job yesterday.", "Jon", None) == "Jon lost their job yesterday."
    assert third_person_text("Just went to the fair.", "Jon", None) == "Jon just went to the fair."
    assert third_person_text("Finishing it was hard.", "Jon", None) == "Finishing it was hard."


def test_third_person_agreement() -> None:
    assert [third_person(v) for v in ("love", "watch", "try", "play", "go", "have", "am", "'ve")] == [
        "loves", "watches", "tries", "plays", "goes", "has", "is", "has",
    ]  # fmt: skip
    # past tenses, participles, modals and adverbs stay
    assert [third_person(v) for v in ("went", "adopted", "can", "really", "finishing")] == [
        "went", "adopted", "can", "really", "finishing",
    ]  # fmt: skip


def test_questions_and_small_talk_are_dropped_and_each_turn_gives_one_dated_observation() -> None:
    out = observations(SCOPE, CHAT, budget=1.0)
    texts = [o.text for o in out]
    assert texts == [
        "Nate got their turtles a new tank yesterday (2 June 2022), they love it.",
        "Joanna is writing a screenplay about their grandmother's farm in Ohio.",
        "Nate and others are hosting a gaming tournament next week (the week of 6 June 2022)"
        " at Nate's place.",
        "Joanna's screenplay idea is brilliant, Joanna should send it to the festival in Toronto.",
    ]
    assert not any("?" in t or "Hey" in t or "Thanks" in t for t in texts)


def test_provenance_is_the_turn_said_and_its_unit() -> None:
    out = observations(SCOPE, CHAT, budget=1.0)
    assert [(o.speaker, o.turn_ids, o.source_ids) for o in out] == [
        ("Nate", ("D1:0",), ("u0",)),
        ("Joanna", ("D1:1",), ("u1",)),
        ("Nate", ("D1:2",), ("u2",)),
        ("Nate", ("D1:4",), ("u4",)),
    ]
    assert [o.said for o in out] == [CHAT[i].ts for i in (0, 1, 2, 4)]


def test_a_photo_caption_is_not_an_observation() -> None:
    units = session(("Nate", "I built a tank for my turtles.\n[shares a photo: a turtle in a tank]"))
    assert [o.text for o in observations(SCOPE, units, 1.0)] == ["Nate built a tank for their turtles."]


def test_the_budget_keeps_a_share_of_the_raw_tokens_in_time_order() -> None:
    everything = observations(SCOPE, CHAT, 1.0)
    raw = sum(tokens(u.text) for u in CHAT)
    for budget in (0.33, 0.5):
        some = observations(SCOPE, CHAT, budget)
        assert 0 < len(some) < len(everything)
        # the budget counts the sentences as said; a name or a date note adds a few tokens each
        assert sum(tokens(o.text) for o in some) <= budget * raw + 6 * len(some)
        assert {o.text for o in some} <= {o.text for o in everything}
        assert [o.said for o in some] == sorted(o.said for o in some)


def test_the_budget_keeps_the_most_specific_sentence() -> None:
    units = session(
        ("Nate", "I like the food here and the food at home."),
        ("Joanna", "The food at home is good food here."),
        ("Nate", "I adopted a tortoise called Shelby in Lisbon."),
        ("Joanna", "Good food at home is the best food here."),
    )
    kept = observations(SCOPE, units, 0.3)  # room for one sentence
    assert [o.text for o in kept] == ["Nate adopted a tortoise called Shelby in Lisbon."]


def test_the_key_ignores_case_punctuation_and_date_but_not_the_speaker() -> None:
    a = observations(SCOPE, session(("Nate", "I adopted two turtles last year.")), 1.0)[0]
    later = [
        Source(
            id="x",
            ts=T0 + timedelta(days=30),
            text="Nate: i adopted TWO turtles, last year!",
            turn_ids=("D2:1",),
        )
    ]
    b = observations(SCOPE, later, 1.0)[0]
    other = observations(SCOPE, session(("Joanna", "I adopted two turtles last year.")), 1.0)[0]
    assert a.text != b.text and a.key == b.key and a.key != other.key


@given(st.permutations(CHAT), st.floats(min_value=0.05, max_value=1.5))
def test_deterministic_whatever_order_the_units_come_in(units: list[Source], budget: float) -> None:
    assert observations(SCOPE, units, budget) == observations(SCOPE, CHAT, budget)


@given(st.lists(st.sampled_from([s.text.split(": ", 1)[1] for s in CHAT]), min_size=2, max_size=8))
def test_every_observation_is_third_person_and_dated_by_its_turn(said: list[str]) -> None:
    units = session(*((("Nate", "Joanna")[i % 2], text) for i, text in enumerate(said)))  # two speakers
    for o in observations(SCOPE, units, 1.0):
        assert o.text.endswith(".") and o.said == units[int(o.source_ids[0][1:])].ts
        assert not any(w in o.text.split() for w in ("I", "my", "me", "we", "our", "you", "your"))


# --- merging into memories (memstream.consumers.tree.observation_memories) ----------------------------------


def closed(day: int) -> WindowClosed:
    at = T0 + timedelta(days=day)
    return WindowClosed(
        window_id=f"w{day}", tenant="t", user_id="u", level=WindowLevel.SESSION, start=at, end=at,
        timezone="UTC", session_id=f"s{day}", first_ts=at, last_ts=at, events=1, reason=CloseReason.IDLE,
    )  # fmt: skip


def draft(day: int, turn: str, text: str = "Nate has pet turtles.") -> ObservationDraft:
    return ObservationDraft(text, "Nate", T0 + timedelta(days=day), (f"u-{turn}",), (turn,))


def test_said_again_on_a_later_day_keeps_the_first_memory_and_notes_the_latest_day() -> None:
    first = observation_memories(closed(0), [draft(0, "D1:1")], ["m"], {}, SCOPE.zone)[0]
    assert (first.text, first.start, first.source_turn_ids) == ("Nate has pet turtles.", T0, ["D1:1"])
    again = observation_memories(closed(7), [draft(7, "D2:4")], ["m"], {"m": first}, SCOPE.zone)[0]
    assert again.text == "Nate has pet turtles (again 10 June 2022)."
    assert (again.start, again.recorded_at) == (T0, T0 + timedelta(days=7))
    assert again.source_turn_ids == again.covers_turn_ids == ["D1:1", "D2:4"]
    assert again.source_unit_ids == ["u-D1:1", "u-D2:4"]
    latest = observation_memories(closed(9), [draft(9, "D3:2")], ["m"], {"m": again}, SCOPE.zone)[0]
    assert latest.text == "Nate has pet turtles (again 12 June 2022)."  # the latest day only
    # redelivered: the same memory again
    assert observation_memories(closed(9), [draft(9, "D3:2")], ["m"], {"m": latest}, SCOPE.zone) == [latest]


def test_the_same_turn_redelivered_or_said_twice_a_day_writes_one_memory_without_a_note() -> None:
    fresh = observation_memories(closed(0), [draft(0, "D1:1")], ["m"], {}, SCOPE.zone)
    assert observation_memories(closed(0), [draft(0, "D1:1")], ["m"], {"m": fresh[0]}, SCOPE.zone) == fresh
    twice = observation_memories(closed(0), [draft(0, "D1:1"), draft(0, "D1:5")], ["m", "m"], {}, SCOPE.zone)
    assert [(m.text, m.source_turn_ids) for m in twice] == [("Nate has pet turtles.", ["D1:1", "D1:5"])]


def test_observation_memories_are_level_one_extractive_and_name_their_turn() -> None:
    (m,) = observation_memories(closed(0), [draft(0, "D1:1")], ["m"], {}, SCOPE.zone)
    assert (m.kind, m.level, m.extractive, m.model) == (MemoryKind.OBSERVATION, 1, True, None)
    assert m.start == m.end == m.recorded_at and m.window_id == "w0" and m.triple is None


def test_with_pronouns_a_person_is_named_once_a_sentence() -> None:
    # as a summary tells it: the name first, then they/them/their, for the speaker and the addressee
    assert third_person_text("I think I'm done with my part.", "Jo", "Mel", pronouns=True) == (
        "Jo thinks they're done with their part."
    )
    assert third_person_text("It made me think I should call my mom.", "Jo", None, pronouns=True) == (
        "It made Jo think they should call their mom."
    )
    assert third_person_text("The group gave me courage to embrace myself.", "Jo", None, pronouns=True) == (
        "The group gave Jo courage to embrace themselves."
    )
    assert third_person_text("We went camping and I was happy we did.", "Jo", None, pronouns=True) == (
        "Jo and others went camping and they were happy they did."
    )
    assert third_person_text("I'm proud of you, you did it yourself.", "Jo", "Mel", pronouns=True) == (
        "Jo is proud of Mel, they did it themselves."
    )
    assert third_person_text("I told you so.", "Jo", "Mel", pronouns=True) == "Jo told Mel so."
    assert third_person_text("Your idea helped you.", "Jo", "Mel", pronouns=True) == "Mel's idea helped them."
    assert third_person_text("I love my me-time.", "Jo", None, pronouns=True) == "Jo loves their me-time."


@given(st.sampled_from([text for u in CHAT for text in [u.text.split(": ", 1)[1]]]))
def test_pronouns_leave_the_first_mention_and_observations_as_they_were(text: str) -> None:
    plain = third_person_text(text, "Nate", "Joanna")
    summary = third_person_text(text, "Nate", "Joanna", pronouns=True)
    # the default (observations) still names the person every time; with pronouns, never more often
    assert summary.count("Nate") <= plain.count("Nate") and summary.count("Joanna") <= plain.count("Joanna")
    assert ("Nate" in plain) == ("Nate" in summary) and ("Joanna" in plain) == ("Joanna" in summary)

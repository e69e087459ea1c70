"""The sample set's time expressions resolve to the day they talk about, its timeline holds, and what a
user says on one day does not contradict itself."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta

from memstream.adapters.settings import Settings
from memstream.apps.sample_conversations import CHITCHAT, FOLLOW_UPS, generate, when
from memstream.consumers.extractive import Claim, classify, split_sentences
from memstream.core.semantic_time import extract_event_times
from memstream.schemas.events import Turn
from memstream.schemas.memory import FactType


def test_every_time_expression_resolves_to_the_day_it_names() -> None:
    said = date(2025, 1, 6)
    for s in range(14):
        for offset in range(-30, 31):
            if offset == 0:
                continue
            day, event = said + timedelta(days=s), said + timedelta(days=s + offset)
            expression = when(event, day)
            at = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
            found = extract_event_times(f"It happens {expression}.", at)
            assert found, expression
            noon = datetime(event.year, event.month, event.day, 12, tzinfo=UTC)
            assert found[0].start <= noon < found[0].end, (day, event, expression, found[0])


def _user_days(turns: list[Turn]) -> dict[tuple[str, date], list[str]]:
    said: dict[tuple[str, date], list[str]] = defaultdict(list)
    for t in turns:
        said[(t.user_id, t.ts.date())].append(t.messages[0].content)
    return said


def _sentences(t: Turn) -> list[str]:
    return split_sentences(t.messages[0].content)


def _claim(t: Turn, sentence: str) -> Claim | None:
    """What the extractive writer reads in ``sentence``, its time expressions left out as it does."""
    at = t.ts.replace(tzinfo=UTC)
    return classify(sentence, [e.expression for e in extract_event_times(sentence, at)])


def test_where_users_live_is_read_as_a_fact_before_the_move_and_superseded_after() -> None:
    turns = list(generate(users=5, days=45, seed=7))
    for user in sorted({t.user_id for t in turns}):
        said = [_claim(t, sentence) for t in turns if t.user_id == user for sentence in _sentences(t)]
        claims = [(c.predicate, c.object) for c in said if c and c.predicate in ("lives in", "moved to")]
        homes = [obj for predicate, obj in claims if predicate == "lives in"]
        old, new = homes[0], homes[-1]
        assert old != new, user
        # every statement of the old home comes before the first of the new one, and the move names it
        first_new = homes.index(new)
        assert set(homes[:first_new]) == {old} and set(homes[first_new:]) == {new}, user
        assert {obj for predicate, obj in claims if predicate == "moved to"} == {new}, user
        # said often enough for recurrence (theta_count similar earlier units) to consolidate it
        assert first_new > Settings().consolidation.theta_count, (user, first_new)
        updates = [c for c in said if c and c.fact_type is FactType.TIME_UPDATE]
        assert any(c.predicate in ("lives in", "moved to") and c.object == new for c in updates), user


def test_nothing_is_said_twice_in_a_day_and_one_occurrence_has_one_outcome() -> None:
    turns = list(generate(users=8, days=60, seed=5))
    outcomes = [
        ("finally sent", "fell off"),
        ("without a mistake", "mostly barre chords"),
        ("loved it", "salt"),
    ]
    for (user, day), texts in _user_days(turns).items():
        assert len(texts) == len(set(texts)), (user, day)
        for good, bad in outcomes:
            assert not (any(good in x for x in texts) and any(bad in x for x in texts)), (user, day, good)


def test_a_session_opens_on_its_topic() -> None:
    turns = list(generate(users=4, days=30, seed=3))
    openers = [t.messages[0].content for t in turns if t.turn_id.endswith("-t0")]
    small_talk = {text.split("{")[0] for text, _ in CHITCHAT + FOLLOW_UPS}
    assert not [o for o in openers if any(o.startswith(s) for s in small_talk)]

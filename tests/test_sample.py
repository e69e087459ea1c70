"""The sample set's time expressions resolve to the day they talk about, and its timeline holds."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from memstream.sample import generate, when
from memstream.semantic_time import extract_event_times


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


def test_users_move_once_and_never_speak_of_the_old_city_as_home_after() -> None:
    turns = list(generate(users=4, days=60, seed=3))
    checked = 0
    for user in {t.user_id for t in turns}:
        said = [(t.ts, t.messages[0].content) for t in turns if t.user_id == user]
        moved = [ts for ts, text in said if text.startswith("We moved to")]
        lives = [(ts, text) for ts, text in said if "I live in" in text]
        if moved and lives:
            assert all((ts < moved[0]) == text.startswith("I live in") for ts, text in lives)
            checked += 1
    assert checked  # some user speaks of home both before and after the move

"""memstream/forgetting.py: which records of a deleted user are still theirs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memstream.forgetting import Forgotten, made_before, sent_before

GONE = Forgotten(deleted_at=100.0, handled_at=100.4)


def test_turns_sent_before_the_delete_are_the_users_and_later_ones_new_data() -> None:
    assert sent_before(GONE, 99.9) and sent_before(GONE, 100.0)
    assert not sent_before(GONE, 100.1)  # sent after the DELETE, even if before it was handled
    assert sent_before(GONE, None)  # no create time: assume it was the user's
    assert not sent_before(None, 50.0)  # never deleted


def test_work_made_before_the_worker_erased_the_user_is_theirs() -> None:
    assert made_before(GONE, 100.2) and made_before(GONE, 100.4) and made_before(GONE, None)
    assert not made_before(GONE, 100.5)
    assert not made_before(None, 1.0)


@given(st.floats(0, 1e10), st.floats(0, 1e10))
def test_the_times_round_trip_through_the_table(deleted: float, handled: float) -> None:
    gone = Forgotten(deleted, handled)
    assert Forgotten.from_json(gone.to_json()) == gone
    assert Forgotten.from_json(None) is None

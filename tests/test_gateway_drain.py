"""The gateway's drain in process: once draining, a turn request is refused with 503 and
Retry-After, the ones already in progress are counted until they finish, and nothing else is
refused. The whole stop of `memstream up` is tests/test_stop.py."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from memstream.apps.gateway.drain import DRAIN_RETRY_AFTER_S, Drain


def test_turns_in_progress_are_counted_until_they_finish_also_when_they_fail() -> None:
    drain = Drain()
    with drain.admit():
        with drain.admit():
            assert drain.turns_in_flight == 2
        drain.start()  # draining with one still in progress: it is counted until it ends
        assert drain.report() == {"ready": False, "draining": True, "turns_in_flight": 1}
    assert drain.turns_in_flight == 0
    failing = Drain()
    with pytest.raises(RuntimeError), failing.admit():
        assert failing.turns_in_flight == 1
        raise RuntimeError("the broker's acks did not come")
    assert failing.turns_in_flight == 0


def test_a_draining_gateway_refuses_new_turns_with_503_and_retry_after() -> None:
    drain = Drain()
    drain.start()
    drain.start()  # a second signal changes nothing
    with pytest.raises(HTTPException) as refused, drain.admit():
        pytest.fail("a turn was admitted while draining")
    assert refused.value.status_code == 503
    assert refused.value.headers == {"Retry-After": str(DRAIN_RETRY_AFTER_S)}
    assert drain.turns_in_flight == 0

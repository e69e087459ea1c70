"""bench/freshness.py, CI-sized: a few seconds of new turns and recalls at a low rate through one real
worker and gateway (its own Tansu broker, hash embedder); every accepted turn is found by recall."""

from __future__ import annotations

import pytest

from bench.freshness import run

pytestmark = pytest.mark.integration


def test_every_accepted_turn_becomes_recallable_and_is_timed() -> None:
    result = run(rate=4, recall_rate=4, seconds=3, users=2, found_timeout=20, preload_turns=60)

    for key in ("p50_ms", "p99_ms", "max_ms", "turns", "found", "missed", "rate", "recall_rate"):
        assert key in result
    assert {"embedder", "date", "machine"} <= result.keys() and result["embedder"] == "hash"
    assert result["turns"] == result["turns_sent"] == 12 and result["turn_outcomes"] == {"202": 12}
    assert result["found"] == 12 and result["missed"] == 0
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"] < 20_000
    assert result["recall_outcomes"] == {"200": 12}

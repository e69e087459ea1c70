"""Slow consumers: one worker draining a backlog keeps its memory bounded and shows its lag in
/metrics. The core of bench/soak.py, CI-sized (its own Tansu broker and `memstream up`, every role,
hash embedder); `python -m bench.soak --json` is the long run."""

from __future__ import annotations

import json

import pytest

from bench.soak import WARMUP_TURNS, run

pytestmark = pytest.mark.integration

TURNS = 25_000
# Private memory (RssAnon: heap and native allocations, not the store's mapped files, which grow
# with the data by design) of the worker, growth per 10,000 turns ingested over the second half of
# the drain (least squares). Measured on the 2-core VM, every role: 6 MiB per 10k turns in this
# test's run, 10-11 MiB over 100,000 turns, 21 MiB over 50,000 (~1-2 KB a turn: Qdrant Edge's
# in-memory indexes of the units and memories stored, the Python heap stays flat; plus allocator
# noise, larger in a short run). A per-turn leak that keeps what a turn becomes (its record, Unit,
# event times, window or tree entry: several KB each) adds 40 MiB or more per 10k turns on top of
# that; 80 MiB (8 KB a turn) leaves room for the noise of a short run and still catches such a
# leak. Smaller leaks need the long run's slope (bench/soak.py, 100,000 turns).
MAX_ANON_GROWTH_MIB_PER_10K_TURNS = 80.0


def test_a_backlog_drains_with_visible_lag_every_turn_stored_and_bounded_memory() -> None:
    result = run(TURNS, users=200, max_seconds=240)
    print(json.dumps(result, indent=1))

    assert result["drained"], "the worker did not drain the backlog within the time bound"
    assert result["stored"] == result["expected"] == TURNS + WARMUP_TURNS
    lag = result["lag"]
    assert result["failed_scrapes"] < result["samples"]
    assert lag["visible_during_drain"] and lag["max"] > 0, "memstream_consumer_lag never showed the backlog"
    assert lag["at_end"] == 0
    growth = result["anon_rss_mib"]["second_half_growth_per_10k_turns"]
    assert growth is not None, "too few samples in the second half of the drain to fit"
    assert growth < MAX_ANON_GROWTH_MIB_PER_10K_TURNS, result["anon_rss_mib"]

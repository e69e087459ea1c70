"""bench/scale.py, CI-sized: one size of the ladder through a real broker and `memstream up`
(ingest role, hash embedder), its figures measured, not assumed. `python -m bench.scale --users
1000000 --json` is the long run."""

from __future__ import annotations

import time

import pytest

from bench.scale import one_size, sizes

pytestmark = pytest.mark.integration


def test_the_ladder_goes_up_tenfold_from_1000_and_ends_at_the_size_asked() -> None:
    assert sizes(1_000) == [1_000]
    assert sizes(1_000_000) == [1_000, 10_000, 100_000, 1_000_000]
    assert sizes(25_000) == [1_000, 10_000, 25_000]


def test_one_size_ingests_restarts_and_closes_every_users_session() -> None:
    figures = one_size(300, 2, "ingest", deadline=time.monotonic() + 240)
    assert figures["turns"] == 600 and figures["turns_per_s"] > 0
    assert figures["state_bytes"]["window-state"] > 0  # read back from the changelog
    assert figures["state_bytes_per_user"] == round(sum(figures["state_bytes"].values()) / 300, 1)
    assert 0 < figures["rss_anon_mib"] <= figures["rss_mib"]
    # Ready means a turn sent after the restart was stored; every session closed after that.
    assert 0 < figures["restart_to_ready_s"] <= figures["idle_close_all_s"]

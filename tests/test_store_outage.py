"""The vector store goes away in the middle of a batch: the stage pauses and runs the same batch
again when the store answers; nothing is skipped, nothing is doubled.

The store is the real embedded Qdrant Edge behind a proxy that raises StoreUnavailable (what the
Qdrant server adapter raises when the server is unreachable) on chosen calls: the fault is
injected, the store and the processor are real."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.adapters.pause import MAX_DELAY_S, next_delay, until_available
from memstream.adapters.settings import Settings, StorageSettings
from memstream.adapters.store import scroll_all
from memstream.adapters.store.shards import EdgeShards
from memstream.apps.sample_conversations import generate
from memstream.core.store import StoreUnavailable, VectorStore
from memstream.core.unit_views import views_spec
from memstream.core.units import UNITS, units_spec
from memstream.streams.ingest import Incoming, IngestProcessor

TURNS = list(generate(users=3, days=45, seed=9))  # 197 store calls: every injected fault happens
RECORDS = [Incoming(t.to_bytes(), t.key, "turns", 0, i) for i, t in enumerate(TURNS)]
BATCH = 64


class Outage:
    """Which store calls fail: the calls numbered in ``failing`` (counted over every method)."""

    def __init__(self, failing: Iterable[int]) -> None:
        self.failing = set(failing)
        self.calls = 0
        self.failed = 0


class FlakyStore:
    def __init__(self, store: VectorStore, outage: Outage) -> None:
        self._store = store
        self._outage = outage

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self._outage.calls += 1
            if self._outage.calls in self._outage.failing:
                self._outage.failed += 1
                raise StoreUnavailable(f"injected outage on call {self._outage.calls} ({name})")
            return method(*args, **kwargs)

        return call


class FlakyShards(EdgeShards):
    def __init__(self, root: Path, outage: Outage) -> None:
        super().__init__(root, [units_spec(384), views_spec(384)])
        self._outage = outage

    def get(self, partition: int) -> VectorStore:
        return FlakyStore(super().get(partition), self._outage)  # type: ignore[return-value]


def replay(tmp: Path, outage: Outage) -> tuple[list[str], list[str], list[str], dict[bytes, Any]]:
    """Every batch through ``until_available`` as the ingest agent runs it; the stored unit ids,
    the request ids fired and the windows closed, and the window state."""
    processor = IngestProcessor(
        Settings(storage=StorageSettings(data_dir=tmp)),
        HashingEmbedder(384),
        FlakyShards(tmp / "store", outage),
    )
    state: dict[bytes, Any] = {}
    requests: list[str] = []
    windows: list[str] = []

    async def no_wait(seconds: float) -> None:
        return None

    async def feed() -> None:
        for i in range(0, len(RECORDS), BATCH):
            batch = RECORDS[i : i + BATCH]
            result = await until_available(lambda: processor.process(batch, state), "ingest", no_wait)  # noqa: B023
            state.update(result.window_state)
            requests.extend(r.request_id for r in result.consolidation)
            windows.extend(f"{w.key}/{w.level.value}/{w.start.isoformat()}" for w in result.windows)

    asyncio.run(feed())
    outage.failing.clear()
    stored = sorted(h.id for h in scroll_all(processor.shards.get(0), UNITS))
    processor.shards.close()
    return stored, requests, windows, state


@pytest.fixture(scope="module")
def clean(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[list[str], list[str], list[str], dict[bytes, Any]]:
    return replay(tmp_path_factory.mktemp("clean"), Outage([]))


@pytest.mark.parametrize(
    "failing",
    [
        [1],  # the very first call of the run
        [3, 4, 5, 6],  # several calls in a row: a longer outage
        [40],  # mid-run, in whichever stage call 40 falls
        [41, 90, 91, 150],  # scattered blips
    ],
)
def test_an_outage_pauses_the_batch_and_changes_nothing(
    tmp_path: Path, failing: list[int], clean: tuple[list[str], list[str], list[str], dict[bytes, Any]]
) -> None:
    outage = Outage(failing)
    stored, requests, windows, state = replay(tmp_path, outage)
    assert outage.failed == len(failing), "the injected faults must have happened"
    clean_stored, clean_requests, clean_windows, clean_state = clean
    assert stored == clean_stored and len(stored) == len(TURNS)  # nothing skipped, nothing doubled
    assert sorted(set(requests)) == sorted(set(clean_requests))  # the same consolidation fired
    assert sorted(set(windows)) == sorted(set(clean_windows))  # the same windows closed
    assert _dialogue(state) == _dialogue(clean_state)  # the same open windows per user


def _dialogue(state: dict[bytes, Any]) -> dict[bytes, Any]:
    """Window state without ``last_seen``, the wall-clock time of the user's latest turn."""
    return {k: {f: v for f, v in w.items() if f != "last_seen"} for k, w in state.items()}


def test_the_pause_backs_off_to_a_cap() -> None:
    delays = [0.5]
    for _ in range(10):
        delays.append(next_delay(delays[-1]))
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0] and delays[-1] == MAX_DELAY_S
    assert all(a <= b for a, b in itertools.pairwise(delays))

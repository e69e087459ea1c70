"""The pipeline in one process, without Kafka: ingest every turn, then run the consolidation
agents' work in topic order (recurrence requests, closed windows, then the months' durative
jobs), applying each result with the indexer. For ``memstream eval``, benchmarks and tests; one
store (partition 0), and every user goes idle at the end so all open windows close."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from memstream.consumers import Consolidation
from memstream.core.store import VectorStore
from memstream.core.tree import TreeState
from memstream.core.windows import UserWindows, close_idle
from memstream.schemas.events import ConsolidationRequest, Turn, WindowClosed, WindowLevel
from memstream.streams.ingest import Incoming, IngestProcessor

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class Events:
    """What ingest published for consolidation."""

    requests: list[ConsolidationRequest] = field(default_factory=list)
    windows: list[WindowClosed] = field(default_factory=list)


async def ingest_all(
    processor: IngestProcessor, turns: Iterable[Turn], batch_size: int, progress: Progress | None = None
) -> Events:
    records = [Incoming(t.to_bytes(), t.key, "turns", 0, i) for i, t in enumerate(turns)]
    state: dict[bytes, Any] = {}
    events = Events()
    for i in range(0, len(records), batch_size):
        result = await processor.process(records[i : i + batch_size], state)
        state.update(result.window_state)
        events.requests += result.consolidation
        events.windows += result.windows
        if progress:
            progress("ingested", min(i + batch_size, len(records)), len(records))
    for raw in state.values():  # the conversations are over: idleness closes what is still open
        events.windows += close_idle(UserWindows.from_json(raw), now=4e9, idle_close=timedelta(seconds=1))[1]
    return events


async def consolidate_all(
    c: Consolidation, store: VectorStore, events: Events, progress: Progress | None = None
) -> int:
    """What the app's consolidate and index agents do; returns the number of updates applied."""
    trees: dict[str, TreeState] = {}
    applied = 0
    for n, req in enumerate(events.requests, 1):
        updates = await c.recurrence.handle(store, req)
        await c.indexer.apply(store, updates)
        applied += len(updates)
        if progress:
            progress("consolidated requests", n, len(events.requests))
    for n, w in enumerate(events.windows, 1):
        trees[w.key], updates = await c.tree.handle(store, trees.get(w.key, TreeState()), w)
        await c.indexer.apply(store, updates)
        applied += len(updates)
        if progress:
            progress("summarised windows", n, len(events.windows))
    for w in events.windows:  # the app runs durative memory a while after a month closed
        if w.level == WindowLevel.MONTH:
            updates = await c.tree.durative(store, w)
            await c.indexer.apply(store, updates)
            applied += len(updates)
    return applied

"""The pipeline in one process, without Kafka: the topology's own handlers (streams/handlers.py) and
its publisher (streams/publish.py), over in-memory topics and a simulated clock. ``memstream eval
locomo``, the benchmarks and the tests run it, so they measure what ``memstream up`` runs;
tests/test_one_pipeline.py pins that both make the same memory of the same turns.

A run (``InProcess.run``): every turn goes on ``turns`` and is ingested a batch at a time; the
topics are drained; the clock jumps to when every user has been idle for ``idle_close_s``, the idle
timer's handler closes what is still open, and the topics are drained again. Draining hands each
topic's records to its handler, as the topology's agents would finish them if work took no time:
``memory.updates`` first (indexed before the next work reads ``memories``: the read-your-writes
barrier makes a worker wait for that too), then ``consolidation``, ``windows``, and last
``deferred``, one record at a time. A handler that waits at the barrier lets the indexer run.

What differs from ``memstream up`` (none of it changed the memory in tests/test_one_pipeline.py):

1. One partition and one store (partition 0): every user's records share it, so nothing is
   forwarded to its key's partition and no rebalance hands work on (the takeover half of the barrier
   never waits). Every read is filtered by user; an approximate search over a store holding more
   users could still rank otherwise (the reason recall briefs are off by default).
2. Time is simulated. It starts at the wall clock (turns are validated against it) and moves only
   when a handler sleeps (a not-yet-due deferred record goes round once a second; a store outage's
   pause) and at the idle close. Work takes no time, so what waits for a delay (a month's durative
   memory, ``durative_delay_s`` after the month closed; deferred work) runs after all the work that
   does not wait. ``memstream up`` gets the same order while its consolidation keeps up within
   ``durative_delay_s``; the idle timer closes a user's windows once the whole input is in, as for a
   replay that outpaces ``idle_close_s``.
3. Sends cannot fail and nothing is redelivered; nothing deletes a user (no ``tombstones``);
   dead letters stay on their topic (``published(DEAD_LETTER, DeadLetter)``).
4. Deferred work still waiting when the clock has moved ``DEFERRED_PATIENCE_S`` past the start of a
   drain (an LLM down for good, a token budget spent until midnight) raises ``StillDeferred``, where a
   worker would go on waiting.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from memstream.adapters.settings import Settings
from memstream.adapters.store.shards import Shards
from memstream.consumers import Consolidation, build_consolidation
from memstream.core.embedder import Embedder
from memstream.core.forgetting import Forgotten
from memstream.schemas.events import Record, Turn
from memstream.schemas.topics import (
    ALL_TOPICS,
    CONSOLIDATION,
    DEFERRED,
    MEMORY_UPDATES,
    TURNS,
    WINDOWS,
    TopicSpec,
)
from memstream.streams.decisions import made_at
from memstream.streams.handlers import IdleWindows, Ingesting
from memstream.streams.ingest import Incoming, IngestProcessor
from memstream.streams.publish import Publisher
from memstream.streams.read_your_writes import OwnWrites, ReadYourWrites, Takeover
from memstream.streams.worker import Handlers

R = TypeVar("R", bound=Record)
Progress = Callable[[str, int, int], None]  # (topic, records handled, records published on it)

PARTITION = 0
DEFERRED_PATIENCE_S = 3600.0


class StillDeferred(Exception):
    """Deferred work that would not come due within DEFERRED_PATIENCE_S of simulated time."""


class Clock:
    """Simulated time, in epoch seconds: it moves only when a handler sleeps or the run jumps it."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)

    def advance_to(self, t: float) -> None:
        self.now = max(self.now, t)


async def _delivered() -> None:
    """An in-memory send is delivered once made."""


class Topics:
    """In-memory topics of one partition: every record sent to each, and how far it has been read."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.logs: dict[str, list[Incoming]] = {spec.name: [] for spec in ALL_TOPICS}
        self.read = dict.fromkeys(self.logs, 0)

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]
    ) -> Awaitable[None]:
        """The producer the topology's Publisher sends through (streams/publish.py)."""
        self.append(topic, key, value, made_at(headers, self.clock()))
        return _delivered()

    def append(self, topic: str, key: bytes, value: bytes, timestamp: float | None) -> None:
        log = self.logs[topic]
        log.append(Incoming.read(key, value, topic, PARTITION, len(log), timestamp))

    def take(self, spec: TopicSpec, limit: int) -> list[Incoming]:
        """Up to ``limit`` records not read yet, now read."""
        start = self.read[spec.name]
        taken = self.logs[spec.name][start : start + limit]
        self.read[spec.name] = start + len(taken)
        return taken

    def keep_unread(self, spec: TopicSpec, keep: Callable[[Incoming], bool]) -> None:
        """Drop the unread records ``keep`` rejects (for tests that consolidate part of the input)."""
        log, start = self.logs[spec.name], self.read[spec.name]
        log[start:] = [r for r in log[start:] if keep(r)]

    def waiting(self, spec: TopicSpec) -> int:
        return len(self.logs[spec.name]) - self.read[spec.name]

    def progress(self, spec: TopicSpec) -> tuple[int, int]:
        return self.read[spec.name], len(self.logs[spec.name])

    def published(self, spec: TopicSpec, model: type[R]) -> list[R]:
        """Every record sent to the topic, read back."""
        return [model.from_bytes(r.value or b"") for r in self.logs[spec.name]]


def no_one_gone(_: bytes | None) -> Forgotten | None:
    return None  # nothing in process deletes a user


class InProcess:
    """The topology's handlers, wired as streams/app.py wires them, for one partition's store."""

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        shards: Shards,
        consolidation: Consolidation | None = None,
        batch_size: int | None = None,
    ) -> None:
        self.clock = Clock(time.time())  # turns are validated against it, as against a worker's
        self.topics = Topics(self.clock)
        self.batch_size = batch_size or settings.worker.batch_size
        self.processor = IngestProcessor(settings, embedder, shards, self.clock)
        own = OwnWrites(sleep=self._index_meanwhile, clock=self.clock)
        barrier = ReadYourWrites(Takeover(settings, settings.kafka.topic(MEMORY_UPDATES.name)), own)
        self.publish = Publisher(self.topics.send, own)
        window_states: dict[bytes, Any] = {}
        self.idle = IdleWindows(window_states, lambda _: PARTITION, self.processor.idle_close, self.clock)
        self.ingesting = Ingesting(
            self.processor.process, window_states, no_one_gone, self.idle.saved, self.clock.sleep
        )
        # The worker's own factory, with in-memory parts: the same handlers as streams/app.py's roles.
        handlers = Handlers(
            consolidation or build_consolidation(settings, embedder, self.processor.theta_sim),
            settings.consolidation,
            shards.get,
            barrier,
            no_one_gone,
            lambda: False,
            self.clock,
            self.publish,
            self.clock.sleep,
        )
        consolidators = handlers.consolidators({})
        self.indexing = handlers.indexing()
        # The agents that take one record at a time, in the order their topics are drained.
        self.agents: dict[TopicSpec, Callable[[Incoming], Awaitable[None]]] = {
            CONSOLIDATION: consolidators.request,
            WINDOWS: consolidators.window,
            DEFERRED: consolidators.deferred,
        }
        self.last_ingest = self.clock()

    async def run(self, turns: Iterable[Turn], progress: Progress | None = None) -> None:
        await self.ingest(turns, progress)
        await self.settle(progress)

    async def settle(self, progress: Progress | None = None) -> None:
        """What ingest published consolidated and indexed, then every user idle, and the windows
        still open closed and consolidated."""
        await self.drain(progress)
        await self.go_idle()
        await self.drain(progress)

    async def ingest(self, turns: Iterable[Turn], progress: Progress | None = None) -> None:
        for t in turns:
            self.topics.append(TURNS.name, t.key.encode(), t.to_bytes(), self.clock())
        while batch := self.topics.take(TURNS, self.batch_size):
            await self.publish(*await self.ingesting.batch(batch))
            self.last_ingest = self.clock()
            _report(progress, self.topics, TURNS)

    async def go_idle(self) -> None:
        """The clock jumps to when every user has been idle for ``idle_close_s``, and the idle
        timer's handler closes their windows (streams/app.py, close_idle_windows)."""
        self.clock.advance_to(self.last_ingest + self.processor.idle_close.total_seconds())
        while True:
            done = self.idle.close({PARTITION}, assignment=1)
            await self.publish(done)
            if not done.windows:
                return

    async def drain(self, progress: Progress | None = None) -> None:
        """Hand every topic's records to its handler until no record is left unread."""
        started = self.clock()
        while True:
            if await self._index():
                _report(progress, self.topics, MEMORY_UPDATES)
                continue
            spec = next((s for s in self.agents if self.topics.waiting(s)), None)
            if spec is None:
                return
            if spec == DEFERRED and self.clock() - started > DEFERRED_PATIENCE_S:
                waiting = self.topics.waiting(DEFERRED)
                raise StillDeferred(f"{waiting} deferred records not due after {DEFERRED_PATIENCE_S:.0f}s")
            await self.agents[spec](self.topics.take(spec, 1)[0])
            _report(progress, self.topics, spec)

    async def _index(self) -> bool:
        """The index agent's next batch, if any: whether there was one."""
        updates = self.topics.take(MEMORY_UPDATES, self.batch_size)
        if updates:
            await self.publish(*await self.indexing.batch(updates))
        return bool(updates)

    async def _index_meanwhile(self, seconds: float) -> None:
        """A handler waiting at the read-your-writes barrier: the index agent goes on meanwhile."""
        await self.clock.sleep(seconds)
        await self._index()


def _report(progress: Progress | None, topics: Topics, spec: TopicSpec) -> None:
    if progress:
        progress(spec.name, *topics.progress(spec))

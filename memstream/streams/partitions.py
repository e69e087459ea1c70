"""A worker's partitions: which it owns and whose stores it holds, kept through rebalances; how far
ingest has got in each partition of turns; and the lag of every partition it reads."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import faust
from faust.types import TP, EventT

from memstream.adapters import metrics
from memstream.adapters.settings import KafkaSettings
from memstream.schemas.topics import ALL_TOPICS, TURNS


class Partitions:
    """The partitions of one worker's consumer (``app.consumer``), read when asked: the app need not
    have started when this is built."""

    def __init__(self, app: faust.App, kafka: KafkaSettings, clock: Callable[[], float], idle_close_s: float):
        self.app = app
        self.clock = clock
        self.idle_close_s = idle_close_s
        self.turns = kafka.topic(TURNS.name)
        self.data_topics = {kafka.topic(spec.name) for spec in ALL_TOPICS}
        # Partitions whose store this worker holds: those of any data topic it is assigned (a worker may
        # run only some of the roles). Kept here rather than read from the consumer, which still lists
        # revoked partitions until the next assignment: opening one of their stores then (a gateway
        # read, /status) would keep it from its next owner.
        self._holding: set[int] = set()
        # Per partition of turns: the offset after the last batch ingested, and when it was.
        self._ingested: dict[int, tuple[int, float]] = {}

    def owned(self) -> set[int]:
        """Partitions of the turns topic this worker processes now."""
        return {tp.partition for tp in self.app.consumer.assignment() if tp.topic == self.turns}

    def held(self) -> set[int]:
        return set(self._holding)

    def take(self, assigned: set[TP]) -> set[int]:
        """An assignment: the partitions whose stores this worker holds from now on."""
        self._holding.clear()
        self._holding.update(tp.partition for tp in assigned if tp.topic in self.data_topics)
        return self.held()

    def revoke(self, revoked: set[TP]) -> list[int]:
        """A revocation: the partitions whose stores this worker no longer holds, and no longer reports
        the lag of."""
        gone = sorted({tp.partition for tp in revoked if tp.topic in self.data_topics})
        self._holding.difference_update(gone)
        for tp in revoked:
            metrics.CONSUMER_LAG.remove(tp.topic, str(tp.partition))
        return gone

    def ingested(self, events: Iterable[EventT]) -> None:
        """A batch of turns ingested (or forwarded): their partitions have got past them, now."""
        for e in events:
            msg, at = e.message, self.clock()
            self._ingested[msg.partition] = (
                max(self._ingested.get(msg.partition, (0, at))[0], msg.offset + 1),
                at,
            )

    def turns_behind(self) -> set[int]:
        """Partitions of turns whose log (as of the latest fetch) holds turns not ingested yet, while
        ingest is working through them: a log end that no batch moved towards for the idle close is
        not turns (a transaction marker takes an offset) or not ours to wait for."""
        now, out = self.clock(), set()
        for tp in self.app.consumer.assignment():
            offset, at = self._ingested.get(tp.partition, (0, 0.0)) if tp.topic == self.turns else (0, 0.0)
            high = self.app.consumer.highwater(tp) if at else None
            if high is not None and high > offset and now - at < self.idle_close_s:
                out.add(tp.partition)
        return out

    def update_lag(self) -> None:
        """Records not yet read, per partition of every topic this worker reads: a backlog shows
        wherever it builds up (turns, consolidation, windows, memory.updates, deferred)."""
        read = self.app.monitor.tp_read_offsets or {}
        for tp in self.app.consumer.assignment():
            high = self.app.consumer.highwater(tp) if tp.topic in self.data_topics else None
            if high is not None:
                done = read.get(tp, -1) + 1
                metrics.CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(max(high - done, 0))

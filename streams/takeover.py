"""Taking a partition over. Consolidation decides merges and supersessions on the ``memories``
collection, which the index role fills from ``memory.updates``. A worker waits for its own
updates per user (consumers/own_writes.py), but after a rebalance the partition's previous owner
(a killed pod, a rolling restart, or this worker before an eager rebalance) may have published
updates the index has not applied yet; a merge decided then rewrites an episode without the
requests folded into it meanwhile. So the first consolidation work on a newly assigned
partition waits until the consumer group has committed every ``memory.updates`` record of that
partition that existed at that moment: the index role has applied them.

Bounded like the own-writes wait (after the timeout the work goes on, logged and counted), and
interrupted like it: a worker that stops or rebalances again hands the work on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from aiokafka import TopicPartition

from consumers.own_writes import Interrupted
from memstream import metrics
from memstream.kafka import group_offsets
from memstream.settings import Settings

log = logging.getLogger(__name__)


class Takeover:
    def __init__(self, settings: Settings, topic: str, timeout_s: float = 30.0, poll_s: float = 0.2) -> None:
        self._settings = settings
        self._topic = topic  # memory.updates
        self._timeout_s = timeout_s
        self._poll_s = poll_s
        self._unchecked: set[int] = set()
        self._assignments = 0
        self._lock = asyncio.Lock()  # one check at a time; the agents asking next find it done

    def assigned(self, partitions: Iterable[int]) -> None:
        # faust rebalances eagerly: every assignment hands each partition over anew.
        self._unchecked = set(partitions)
        self._assignments += 1

    def unchecked(self) -> set[int]:
        return set(self._unchecked)

    async def ready(self, partition: int, interrupted: Callable[[], bool]) -> None:
        """Return once the index shows what was published on ``partition`` before this worker
        took it; raises ``Interrupted`` when ``interrupted()`` turns true meanwhile."""
        if partition not in self._unchecked:
            return
        async with self._lock:
            if partition not in self._unchecked:
                return
            start, assignment = time.monotonic(), self._assignments
            tp = TopicPartition(self._topic, partition)
            async with group_offsets(self._settings) as consumer:
                end = (await consumer.end_offsets([tp]))[tp]
                while (await consumer.committed(tp) or 0) < end:
                    if interrupted():
                        raise Interrupted(f"{tp.topic}/{partition} not indexed up to {end} yet")
                    if time.monotonic() - start > self._timeout_s:
                        metrics.TAKEOVER_TIMEOUTS.inc()
                        log.warning(
                            "%s/%d not indexed up to %d after %.0fs; consolidating anyway",
                            tp.topic,
                            partition,
                            end,
                            self._timeout_s,
                        )
                        break
                    await asyncio.sleep(self._poll_s)
            if assignment == self._assignments:  # else a new assignment came meanwhile: check again
                self._unchecked.discard(partition)
            metrics.TAKEOVER_WAIT.observe(time.monotonic() - start)

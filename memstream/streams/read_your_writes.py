"""Read your writes: consolidation decides merges and supersessions on the ``memories`` collection,
which the index role fills from ``memory.updates`` a little later. A decision taken before the
index caught up depends on timing (two runs of the same turns differed in ~8 % of their memories,
tests/test_replicas.py), so consolidation work first waits at one barrier with two halves:

* ``Takeover``: the first work on a newly assigned partition waits until the consumer group has
  committed every ``memory.updates`` record of that partition that existed then (what a previous
  owner, a killed pod or this worker before a rebalance, published);
* ``OwnWrites``: a user's next work waits until what this process published for them shows.

Both are bounded (after the timeout the work goes on, logged and counted). While the worker stops
or rebalances its index agent reads nothing, so a wait cannot end: the work is handed on
(``Interrupted``; the caller defers it) rather than decided on a stale read or left to hold up the
rebalance."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable

from aiokafka import TopicPartition

from memstream.adapters import metrics
from memstream.adapters.kafka import group_offsets
from memstream.adapters.settings import Settings
from memstream.core.memories import MEMORIES, memory_from_payload
from memstream.core.store import VectorStore
from memstream.schemas.memory import Memory, MemoryOp, MemoryUpdate

log = logging.getLogger(__name__)

MAX_USERS = 10_000  # users remembered; the oldest are surely indexed long since


class Interrupted(Exception):
    """The worker is stopping or rebalancing: the work must be handed on, not done now."""


class ReadYourWrites:
    """The barrier consolidation work passes before it reads ``memories``."""

    def __init__(self, takeover: Takeover, own: OwnWrites) -> None:
        self.takeover = takeover
        self.own = own

    async def wait(
        self, store: VectorStore, partition: int, user_key: str, interrupted: Callable[[], bool]
    ) -> None:
        """Return once what was published before (by a previous owner of ``partition``, then by
        this process for the user) shows in ``store``; raises ``Interrupted``."""
        await self.takeover.ready(partition, interrupted)
        await self.own.visible(store, user_key, interrupted)


def reflects(update: MemoryUpdate, stored: Memory | None) -> bool:
    """Whether the stored memory shows ``update`` (the latest this process sent for its id)."""
    if update.op == MemoryOp.UPSERT:
        return stored == update.memory
    if update.op == MemoryOp.INVALIDATE:
        # None: the indexer skips an invalidate of a memory it does not hold (forgotten, or
        # superseded before it was indexed), so there is nothing more to wait for.
        return stored is None or stored.superseded_by == update.superseded_by
    return stored is None


class OwnWrites:
    """The updates this process published, per user, until the store shows them."""

    def __init__(
        self,
        timeout_s: float = 30.0,
        poll_s: float = 0.02,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pending: OrderedDict[str, dict[str, MemoryUpdate]] = OrderedDict()
        self._forgotten: OrderedDict[str, int] = OrderedDict()  # times each user was forgotten
        self._timeout_s = timeout_s
        self._poll_s = poll_s
        self._sleep = sleep
        self._clock = clock

    def published(self, updates: Iterable[MemoryUpdate]) -> None:
        for u in updates:
            mine = self._pending.setdefault(u.key, {})
            mine[u.memory_id] = u  # the latest update of an id is the one to wait for
            self._pending.move_to_end(u.key)
        while len(self._pending) > MAX_USERS:
            self._pending.popitem(last=False)

    def forget(self, user_key: str) -> None:
        self._pending.pop(user_key, None)
        self._forgotten[user_key] = self.generation(user_key) + 1
        self._forgotten.move_to_end(user_key)
        while len(self._forgotten) > MAX_USERS:
            self._forgotten.popitem(last=False)

    def generation(self, user_key: str) -> int:
        """How many times the user was forgotten lately: updates sent before it changed are the
        deleted user's, which the indexer drops, so nothing may wait for them."""
        return self._forgotten.get(user_key, 0)

    def waiting(self, user_key: str) -> int:
        return len(self._pending.get(user_key, {}))

    async def visible(
        self, store: VectorStore, user_key: str, interrupted: Callable[[], bool] = lambda: False
    ) -> None:
        """Return once everything published for the user shows in ``store``, or after the timeout
        (the index role behind or down: logged and counted, and the work goes on). Raises
        ``Interrupted`` when ``interrupted()`` turns true while updates are still missing."""
        pending = self._pending.get(user_key)
        if not pending:
            return
        start = self._clock()
        while True:
            found = {h.id: memory_from_payload(h.payload) for h in store.retrieve(MEMORIES, list(pending))}
            for memory_id in [m for m, u in pending.items() if reflects(u, found.get(m))]:
                del pending[memory_id]
            waited = self._clock() - start
            if not pending:
                break
            if interrupted():
                raise Interrupted(f"{len(pending)} updates of {user_key} not indexed yet")
            if waited > self._timeout_s:
                metrics.OWN_WRITES_TIMEOUTS.inc()
                log.warning("%d updates not indexed after %.0fs; consolidating anyway", len(pending), waited)
                break
            await self._sleep(self._poll_s)
        # Another waiter for this user (the consolidation and the summary agents both wait) may have
        # finished first, and its next work published anew: that entry is not ours to drop.
        if self._pending.get(user_key) is pending:
            del self._pending[user_key]
        metrics.OWN_WRITES_WAIT.observe(waited)


class Takeover:
    """What the partitions' previous owners published, checked once per partition and assignment."""

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

"""Read your own writes. Consolidation reads the ``memories`` collection (the episode to merge into,
the related facts, a month's facts), which the indexer fills from ``memory.updates`` a little
later. Were the next piece of a user's work to read it before the indexer caught up, a merge or a
supersession decision would depend on timing: two runs of the same turns through one worker
differed in ~8% of their memories (measured, tests/test_replicas.py). So the updates this process
published are remembered per user until they are visible, and a user's next work waits for them.

What another worker published before this one took the partition over is waited for once per
partition (streams/takeover.py). While the worker stops or rebalances its index agent reads
nothing, so a wait cannot end: the work is handed on (``Interrupted``; the caller defers it) rather
than decided on a stale read or left to hold up the rebalance."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable

from consumers.memories import MEMORIES, memory_from_payload
from memstream import metrics
from memstream.store.base import VectorStore
from schemas.memory import Memory, MemoryOp, MemoryUpdate

log = logging.getLogger(__name__)

MAX_USERS = 10_000  # users remembered; the oldest are surely indexed long since


class Interrupted(Exception):
    """The worker is stopping or rebalancing: the work must be handed on, not done now."""


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
    def __init__(
        self,
        timeout_s: float = 30.0,
        poll_s: float = 0.02,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pending: OrderedDict[str, dict[str, MemoryUpdate]] = OrderedDict()
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

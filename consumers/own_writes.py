"""Read your own writes. Consolidation reads the ``memories`` collection (the episode to merge into,
the related facts, a month's facts), which the indexer fills from ``memory.updates`` a little
later. Were the next piece of a user's work to read it before the indexer caught up, a merge or a
supersession decision would depend on timing: two runs of the same turns through one worker
differed in ~8% of their memories (measured, tests/test_replicas.py). So the updates this process
published are remembered per user until they are visible, and a user's next work waits for them.

After a restart nothing is remembered: redelivered work may read a collection the indexer has
not caught up with (never losing or doubling a request: it is skipped once folded in, and ids
are deterministic; but a merge may then be decided differently)."""

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
        self, store: VectorStore, user_key: str, stopping: Callable[[], bool] = lambda: False
    ) -> None:
        """Return once everything published for the user shows in ``store``, or after the timeout
        (the index role behind or down: logged and counted, and the work goes on), or when the
        worker is ``stopping`` (its index agent no longer reads: the work goes on rather than
        hold up the stop)."""
        pending = self._pending.get(user_key)
        if not pending:
            return
        start = self._clock()
        while True:
            found = {h.id: memory_from_payload(h.payload) for h in store.retrieve(MEMORIES, list(pending))}
            for memory_id in [m for m, u in pending.items() if reflects(u, found.get(m))]:
                del pending[memory_id]
            waited = self._clock() - start
            if not pending or stopping():
                break
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

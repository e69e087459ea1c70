"""Reads of a partition's store that run off the event loop (a worker's recall, in a thread), how many may
run at once, and the wait a rebalance makes for them before it closes a store they read.

Recall used to run in the worker's event loop, so a rebalance could never close a store under it; but
every recall then held up the ingest batches of that loop (at 25 recalls/s a new turn took 5.5 s at the
median to become recallable). In a thread the loop keeps ingesting; a lease, taken in the loop before
the thread starts, keeps the store open until the read is done.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable


class ReadLeases:
    """Leases on partitions' stores, at most ``limit`` at once over all partitions. ``try_enter`` and
    ``wait_idle`` are called from the event loop, ``exit`` from any thread."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._changed = threading.Condition()
        self._reading: Counter[int] = Counter()

    def try_enter(self, partition: int) -> bool:
        """Lease ``partition``'s store for one read; False when ``limit`` reads are running (shed it)."""
        with self._changed:
            if self._reading.total() >= self.limit:
                return False
            self._reading[partition] += 1
            return True

    def exit(self, partition: int) -> None:
        with self._changed:
            self._reading[partition] -= 1
            if self._reading[partition] <= 0:
                del self._reading[partition]
            self._changed.notify_all()

    def reading(self, partition: int) -> int:
        with self._changed:
            return self._reading[partition]

    def wait_idle(self, partitions: Iterable[int], timeout_s: float) -> bool:
        """Block until no read of ``partitions`` is running (True), or ``timeout_s`` passed (False).
        Called in the event loop as a rebalance releases the stores: no new lease can start meanwhile."""
        wanted = set(partitions)
        with self._changed:
            return self._changed.wait_for(lambda: not any(self._reading[p] for p in wanted), timeout_s)

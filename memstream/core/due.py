"""When each key is next due, found without looking at the keys that are not: the idle timer's index
(streams/handlers.py, ``IdleWindows``), so that a tick costs what is due, not what is stored.

A heap of (due, key) with the latest due of each key beside it; an entry whose key has been given
another due since, or none, is stale and dropped when it comes up. The heap is rebuilt from the live
entries when stale ones outnumber them, so its size stays within twice the keys that have a due.
"""

from __future__ import annotations

import heapq


class DueTimes:
    def __init__(self) -> None:
        self._heap: list[tuple[float, bytes]] = []
        self._due: dict[bytes, float] = {}

    def __len__(self) -> int:
        return len(self._due)

    def set(self, key: bytes, due: float | None) -> None:
        """``key`` is next due at ``due`` (epoch seconds); None: never, until set again."""
        if due is None:
            self._due.pop(key, None)
        elif self._due.get(key) != due:
            self._due[key] = due
            heapq.heappush(self._heap, (due, key))
        if len(self._heap) > 2 * len(self._due) + 64:
            self._heap = [(d, k) for k, d in self._due.items()]
            heapq.heapify(self._heap)

    def pop_due(self, now: float, limit: int | None = None) -> list[bytes]:
        """The keys due at or before ``now``, earliest first, at most ``limit``; they have no due any
        more (the others due stay for the next call)."""
        out: list[bytes] = []
        while self._heap and self._heap[0][0] <= now and (limit is None or len(out) < limit):
            due, key = heapq.heappop(self._heap)
            if self._due.get(key) == due:
                del self._due[key]
                out.append(key)
        return out

    def clear(self) -> None:
        self._heap.clear()
        self._due.clear()

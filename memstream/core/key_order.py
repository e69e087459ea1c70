"""Key-ordered concurrency, as plain data: what Confluent's Parallel Consumer calls KEY ordering.

Records of different keys (users) run at once; the records of one key run strictly one after the
other, in the order they arrived; and a partition's records are released (acknowledged, so their
offsets become committable) only in offset order, each once it and every record before it on its
partition are done. A crash therefore redelivers from the first record not yet done and never skips
one: records done behind it run again, which consolidation already makes harmless (the same ids,
docs/reliability.md). Parallel Consumer tracks completed offsets the same way and also encodes the
done ones beyond the first gap in the commit's metadata; that saves the re-runs and needs a
consumer of its own, so it is not done here.

A partition may deliver a record again after a seek back (streams/delivery.py rewinds to the
committed offset when faust empties its queues). While the partition has records held, a copy of
one of them is acknowledged with it, never before it (that would let the commit pass it), and a copy
of one released before them was done and is acknowledged at once. With nothing held (as after every
rebalance: faust waits for all records to be acknowledged first) a record is taken as it comes, so a
partition that starts again from a lower offset (a broker that lost its data) is read, not skipped.

The shell that runs a stream through this: streams/key_ordered.py.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(eq=False)
class Entry(Generic[T]):
    """One record taken from its partition, until it is released."""

    partition: int
    offset: int
    key: bytes
    item: T
    done: bool = False
    copies: list[T] = field(default_factory=list)  # the same record delivered again meanwhile


class Again(Enum):
    """A record delivered again: held (acknowledged with the first), or released (done before)."""

    HELD = "held"
    RELEASED = "released"


@dataclass
class Finished(Generic[T]):
    """What finishing a record allows: the next record of its key to start, and the records now
    released (every one done, in offset order, each partition's a prefix of what it delivered)."""

    start: Entry[T] | None
    released: list[Entry[T]] = field(default_factory=list)


class KeyOrder(Generic[T]):
    """The records taken and not yet released, by partition (offset order) and by key (the
    running one first, then those waiting behind it)."""

    def __init__(self) -> None:
        self._partitions: dict[int, deque[Entry[T]]] = {}
        self._keys: dict[bytes, deque[Entry[T]]] = {}

    def __len__(self) -> int:
        """Records taken and not yet released."""
        return sum(len(queue) for queue in self._partitions.values())

    def running(self) -> int:
        """Records started and not yet done: one per key at most."""
        return len(self._keys)

    def waiting(self) -> int:
        """Records taken and not yet started: each waits behind its key's running record."""
        return sum(len(mine) - 1 for mine in self._keys.values())

    def add(self, partition: int, offset: int, key: bytes, item: T) -> Entry[T] | Again | None:
        """Take a record as its partition delivers it. Returns its entry when it may start now (no
        earlier record of its key is still to finish), None when it waits behind its key, or
        ``Again`` when it was taken before."""
        queue = self._partitions.get(partition)
        if queue and offset <= queue[-1].offset:
            held = next((e for e in queue if e.offset == offset), None)
            if held is None:  # below the first held offset: released (or no record was there)
                return Again.RELEASED
            held.copies.append(item)
            return Again.HELD
        entry = Entry(partition, offset, key, item)
        self._partitions.setdefault(partition, deque()).append(entry)
        mine = self._keys.setdefault(key, deque())
        mine.append(entry)
        return entry if len(mine) == 1 else None

    def finish(self, entry: Entry[T]) -> Finished[T]:
        """Mark a started record done."""
        mine = self._keys.get(entry.key)
        if not mine or mine[0] is not entry or entry.done:
            raise ValueError(f"{entry.partition}/{entry.offset} is not running")
        entry.done = True
        mine.popleft()
        if not mine:
            del self._keys[entry.key]
        released: list[Entry[T]] = []
        queue = self._partitions[entry.partition]
        while queue and queue[0].done:
            released.append(queue.popleft())
        if not queue:
            del self._partitions[entry.partition]
        return Finished(mine[0] if mine else None, released)

"""Which fetched records reach the agents: each partition's records in offset order, none skipped.

faust delivers whatever its fetcher returns and keeps a "read offset" per partition, dropping
records below it. Around a rebalance that loses records: a seek back to the committed offset
(rebalance, table recovery, a fetch while the flow is stopped) can land while records fetched
before it are still being handed to the streams; one of those moves the read offset past the
seek, and the records fetched again from the seek are then dropped as already read (found by
``tests/test_faults.py``: a consolidation request and a closed window never reached an agent,
and faust committed over them). Here one rule decides instead: a partition's next record is
the offset after the last one delivered, or the offset it was last sought to.

* no seek yet since the partition was assigned: dropped; faust seeks every assigned partition
  to its committed offset once table recovery is done, and fetches it again from there.
* ``offset == expected``: delivered.
* ``offset < expected``: delivered before (a record fetched again after a rewind): dropped.
* ``offset > expected``: either a record fetched before a seek, or the broker has nothing
  between (records expired by retention, compaction, transaction markers). It is dropped and
  the partition rewound to ``expected``; the first record of the first fetch that began after
  that rewind decides: if it is still ahead, the offsets between do not exist and it is
  delivered as a ``GAP``.

Pure bookkeeping over plain data; ``streams/consumer.py`` does the fetching and seeking.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from enum import Enum


class Verdict(Enum):
    DELIVER = "deliver"
    DUPLICATE = "duplicate"  # already delivered: drop
    WAIT = "wait"  # not sought since it was assigned: drop, the coming seek fetches it again
    REWIND = "rewind"  # ahead of the next offset: drop, and seek the partition back to it
    GAP = "gap"  # ahead, and the broker has nothing between: deliver


@dataclass
class _Partition:
    expected: int | None = None  # the next offset to deliver; None until the first seek ends
    epoch: int = 0  # changes at the start and at the end of every seek
    fresh: bool = False  # the last seek has finished and nothing was delivered since


class InOrder:
    def __init__(self) -> None:
        self._parts: dict[Hashable, _Partition] = {}

    def _part(self, tp: Hashable) -> _Partition:
        return self._parts.setdefault(tp, _Partition())

    def expected(self, tp: Hashable) -> int | None:
        part = self._parts.get(tp)
        return part.expected if part else None

    def seeking(self, tp: Hashable) -> None:
        """A seek of ``tp`` begins: a fetch under way may return records from before or after it."""
        part = self._part(tp)
        part.epoch += 1
        part.fresh = False

    def sought(self, tp: Hashable, offset: int) -> None:
        """The seek has finished: the next fetch of ``tp`` starts at ``offset``."""
        part = self._part(tp)
        part.expected = offset
        part.epoch += 1
        part.fresh = True

    def forget(self, tp: Hashable) -> None:
        """``tp`` was revoked: nothing of it is delivered until it is assigned and sought again."""
        self._parts.pop(tp, None)

    def fetch_begins(self) -> dict[Hashable, int]:
        """Taken before a fetch: which seek each partition's records can be after."""
        return {tp: part.epoch for tp, part in self._parts.items()}

    def admit(self, tp: Hashable, offset: int, fetch: Mapping[Hashable, int]) -> Verdict:
        """The verdict on a record of ``tp`` at ``offset`` from the fetch that began at ``fetch``."""
        part = self._parts.get(tp)
        if part is None or part.expected is None:
            return Verdict.WAIT
        if offset < part.expected:
            return Verdict.DUPLICATE
        if offset > part.expected:
            if not (part.fresh and fetch.get(tp) == part.epoch):
                return Verdict.REWIND
            verdict = Verdict.GAP
        else:
            verdict = Verdict.DELIVER
        part.expected = offset + 1
        part.fresh = False
        return verdict

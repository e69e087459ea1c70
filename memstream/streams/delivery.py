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
* ``offset > expected``: fetched before a seek, or the broker no longer has the offsets between
  (expired by retention). Dropped, and the partition rewound to ``expected``, or to the
  broker's earliest offset when that is later (``rewind_to``).
* the streams not flowing yet: faust seeks the partitions when table recovery is done and
  resumes the streams a moment later; a record fetched in between would be skipped by its
  stream (found: a turn at a partition's end never processed, its offset never committed).
  Held back as if it were ahead: dropped, and the partition rewound to it.
* the agents' queues emptied by faust while the streams flow (a second "resume" in one
  rebalance: table recovery resumes the streams, then resumes them again after another seek,
  and resuming empties the queues; found: a closed window delivered in between was never
  processed, its offset never committed): a partition is read again from its first record
  delivered but not yet processed, or from its next offset when all were (``emptied``; faust
  may also have dropped fetched records without handing them over). Reading again from the
  committed offset instead processed a second time what the agents had finished since the last
  commit (found: turns sent while a rebalance ended were counted as duplicates, ~100 a worker
  with 100 ms fetches on Kafka).

Pure bookkeeping over plain data; ``streams/consumer.py`` does the fetching and seeking.
"""

from __future__ import annotations

from collections.abc import Hashable
from enum import Enum
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)  # a partition


class Verdict(Enum):
    DELIVER = "deliver"
    DUPLICATE = "duplicate"  # already delivered: drop
    WAIT = "wait"  # not sought since it was assigned: drop, the coming seek fetches it again
    REWIND = "rewind"  # ahead of the next offset: drop, and seek the partition back (rewind_to)


class InOrder(Generic[K]):
    def __init__(self) -> None:
        self._expected: dict[K, int] = {}  # the next offset to deliver, per sought partition
        self._pending: dict[K, set[int]] = {}  # delivered, not yet processed (``done``)

    def expected(self, tp: K) -> int | None:
        return self._expected.get(tp)

    def seeking(self, tp: K) -> None:
        """A seek of ``tp`` begins: nothing of it is delivered until it has finished."""
        self._expected.pop(tp, None)

    def sought(self, tp: K, offset: int) -> None:
        """The seek has finished: the next fetch of ``tp`` starts at ``offset``. Records from
        there on are delivered again; those before it are still on their way through the agents."""
        self._expected[tp] = offset
        self._pending[tp] = {o for o in self._pending.get(tp, ()) if o < offset}

    def forget(self, tp: K) -> None:
        """``tp`` was revoked: it waits for its next assignment's seek, to the committed offset."""
        self._expected.pop(tp, None)
        self._pending.pop(tp, None)

    def done(self, tp: K, offset: int) -> None:
        """An agent has processed the record at ``offset``."""
        pending = self._pending.get(tp)
        if pending is not None:
            pending.discard(offset)

    def emptied(self) -> dict[K, int]:
        """faust emptied the agents' queues: records delivered but not yet taken are gone. Every
        sought partition is read again from its first record delivered and not processed, or from
        its next offset when all were: faust's getmany may also have dropped records it had
        fetched (it stops mid-fetch when the flow stops or the generation changes), so the fetch
        position is brought back to what was delivered. Until then the partitions wait."""
        again = {tp: min(self._pending.get(tp) or (expected,)) for tp, expected in self._expected.items()}
        self._expected.clear()
        return again

    def admit(self, tp: K, offset: int, flowing: bool = True) -> Verdict:
        """The verdict on a record of ``tp`` at ``offset``. While the streams are not
        ``flowing`` (after a seek, before faust resumes them) a stream would skip the record,
        so it is held back: dropped, and the partition rewound to it."""
        expected = self._expected.get(tp)
        if expected is None:
            return Verdict.WAIT
        if offset < expected:
            return Verdict.DUPLICATE
        if offset > expected or not flowing:
            return Verdict.REWIND
        self._expected[tp] = offset + 1
        self._pending[tp].add(offset)  # made by ``sought``, which every expected offset comes from
        return Verdict.DELIVER

    def rewind_to(self, tp: K, earliest: int) -> tuple[int, range] | None:
        """Where a partition with a record ahead of ``expected`` is sought back to, given the
        broker's earliest offset: the expected offset, or the earliest one and the range of
        offsets that expired before they were delivered. None when the partition no longer
        expects an offset: a seek began, or the queues were emptied (``emptied``), or it was
        revoked while the caller asked the broker for its earliest offset; whoever did that
        seeks it."""
        expected = self._expected.get(tp)
        if expected is None:
            return None
        if earliest > expected:
            return earliest, range(expected, earliest)
        return expected, range(0)

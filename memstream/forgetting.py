"""What a DELETE means for work already on its way. The gateway deletes a user's points and
publishes a tombstone; turns it accepted before the DELETE, and what consolidation makes of them,
may still be in the topics behind it. A worker handling the tombstone erases the user again and
remembers two times per user, so that such records are dropped wherever they arrive later:

* ``deleted_at``: when the gateway deleted the user (its clock). A turn sent before then is
  forgotten (Kafka's create time of the record, set by the gateway that accepted it).
* ``handled_at``: when this worker erased the user (its clock). Consolidation work (a request, a
  closed window, deferred work, a memory update) made by this worker before then is forgotten.

A turn sent after the DELETE but stored before the worker handled the tombstone (typically
within a fraction of a second) is erased with the rest.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Forgotten:
    deleted_at: float  # epoch seconds
    handled_at: float

    def to_json(self) -> list[float]:
        return [self.deleted_at, self.handled_at]

    @classmethod
    def from_json(cls, raw: list[float] | None) -> Forgotten | None:
        return cls(*raw) if raw else None


def sent_before(gone: Forgotten | None, timestamp: float | None) -> bool:
    """Whether a turn created at ``timestamp`` belongs to a deletion (unknown time: assume so)."""
    return gone is not None and (timestamp is None or timestamp <= gone.deleted_at)


def made_before(gone: Forgotten | None, timestamp: float | None) -> bool:
    """Whether work made at ``timestamp`` derives from data of before a deletion."""
    return gone is not None and (timestamp is None or timestamp <= gone.handled_at)

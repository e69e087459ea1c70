"""Forgetting a user. ``erase_user`` deletes their points: the gateway's DELETE does, and a worker
does again when it handles the tombstone (whatever landed after the gateway's delete).

Turns the gateway accepted before the DELETE, and what consolidation makes of them, may still be in
the topics behind the tombstone. A worker handling the tombstone remembers two times per user, so
that such records are dropped wherever they arrive later:

* ``deleted_at``: when the gateway deleted the user (its clock). A turn sent before then is
  forgotten (Kafka's create time of the record, set by the gateway that accepted it).
* ``handled_at``: when this worker erased the user (its clock). Consolidation work (a request, a
  closed window, deferred work, a memory update) made by this worker before then is forgotten. A
  memory update counts as made when its work began, not when it was sent: the erase can run
  while it is on its way.

A turn sent after the DELETE but stored before the worker handled the tombstone (typically
within a fraction of a second) is erased with the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memstream.core.store import Filter, VectorStore
from memstream.core.units import USER_FIELD


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


def erase_user(store: VectorStore, user_key: str, collections: Sequence[str]) -> list[int]:
    """Delete every point of ``user_key`` in each of ``collections``; returns how many each held."""
    mine = Filter(equals={USER_FIELD: user_key})
    counts = [store.count(collection, mine) for collection in collections]
    for collection in collections:
        store.delete(collection, mine)
    return counts

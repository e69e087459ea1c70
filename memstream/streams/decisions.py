"""What a handler (streams/handlers.py) decided about the records it was given, as values. The
topology (streams/app.py) publishes them in one place: records to their topics, delivered
(acks=all) before the input offsets are acknowledged, and the counters that go with each outcome.

A failure is a decision like any other: deferred work is never lost (it goes to ``deferred``, to be
tried again), a record that cannot be used is dead-lettered with the reason, and work made from a
deleted user's data is dropped and counted."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from memstream.schemas.events import DeadLetter, Deferred, Record, WindowClosed
from memstream.schemas.memory import MemoryUpdate
from memstream.schemas.topics import TopicSpec

# The header re-queued work carries: when the work was first made (epoch seconds). A deleted user's
# work is told by that time (memstream/core/forgetting.py), which a re-queued record's own create
# time, set anew each time, would hide.
MADE_AT = "memstream-made-at"


@dataclass(frozen=True)
class Send:
    """One record to publish, as bytes: a re-queued deferred record is forwarded unread."""

    topic: str  # the topic's name without the prefix (schemas/topics.py)
    key: bytes
    value: bytes
    made_at: float | None = None  # when its work was made, if not at the send: the MADE_AT header


def sends(spec: TopicSpec, records: Sequence[Record], made_at: float | None = None) -> list[Send]:
    return [Send(spec.name, (getattr(r, "key", None) or "").encode(), r.to_bytes(), made_at) for r in records]


def made_at(
    headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None, created: float | None
) -> float | None:
    """When a record's work was made: its MADE_AT header, else its create time."""
    found = dict(headers or {}).get(MADE_AT)
    return float(found) if found else created


@dataclass(frozen=True)
class Done:
    """The work is done with: ``sends``, ``windows`` and ``updates`` are published, then ``after``
    runs (state that may move on only once they are delivered: a crash in between makes the same
    records again, where state saved first would lose them)."""

    sends: Sequence[Send] = ()
    windows: Sequence[WindowClosed] = ()  # closed windows, counted by level and reason
    updates: Sequence[MemoryUpdate] = ()  # to memory.updates, then awaited by the next work's barrier
    trigger: str | None = None  # counted as consolidation work of this trigger
    after: Callable[[], None] | None = None
    # When the work that made ``updates`` began: they carry it (MADE_AT). A user deleted after then
    # has them dropped by the indexer, however late their sends are stamped (streams/handlers.py).
    made_at: float | None = None


@dataclass(frozen=True)
class Deferral:
    """Put off (LLM down or its budget spent, the worker rebalancing): to the deferred topic."""

    work: Deferred
    trigger: str
    made_at: float | None = None  # when the work deferred was made (MADE_AT)


@dataclass(frozen=True)
class DeadLettered:
    """Records that cannot be used, with the reason; ``trigger``: counted as invalid work of it."""

    letters: Sequence[DeadLetter]
    trigger: str | None = None


@dataclass(frozen=True)
class Dropped:
    """Records of a deleted user (memstream/core/forgetting.py), counted by the stage that dropped them."""

    stage: str
    count: int = 1


Decision = Done | Deferral | DeadLettered | Dropped

"""The topics of the pipeline, each listed once with its record model and key.

Every topic is keyed by ``tenant/user_id`` (see :func:`memstream.schemas.events.partition_key`), so one
user's events are ordered and handled by one worker. Names carry a configurable prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from memstream.schemas.events import (
    ConsolidationRequest,
    DeadLetter,
    Deferred,
    Record,
    Tombstone,
    Turn,
    WindowClosed,
)
from memstream.schemas.memory import MemoryUpdate


@dataclass(frozen=True)
class TopicSpec:
    name: str
    model: type[Record]
    key: str
    doc: str

    def full_name(self, prefix: str) -> str:
        return f"{prefix}{self.name}"


TURNS = TopicSpec("turns", Turn, "tenant/user_id", "client turns, produced by replay or the gateway")
CONSOLIDATION = TopicSpec(
    "consolidation", ConsolidationRequest, "tenant/user_id", "recurrence fired: consolidate a cluster"
)
WINDOWS = TopicSpec("windows", WindowClosed, "tenant/user_id", "a session/day/week/month window closed")
MEMORY_UPDATES = TopicSpec(
    "memory.updates", MemoryUpdate, "tenant/user_id", "the memory change log (upsert/invalidate/delete)"
)
DEFERRED = TopicSpec(
    "deferred", Deferred, "tenant/user_id", "consolidation put off (budget, LLM down), retried later"
)
DEAD_LETTER = TopicSpec("dead-letter", DeadLetter, "tenant/user_id", "input that failed, with the reason")

TOMBSTONES = TopicSpec("tombstones", Tombstone, "tenant/user_id", "users forgotten through the gateway")

ALL_TOPICS: tuple[TopicSpec, ...] = (
    TURNS,
    CONSOLIDATION,
    WINDOWS,
    MEMORY_UPDATES,
    DEFERRED,
    DEAD_LETTER,
    TOMBSTONES,
)

"""Contracts: the pydantic models of every topic record and stored memory, and the topic list."""

from memstream.schemas.events import (
    ConsolidationRequest,
    DeadLetter,
    DeadLetterStage,
    Deferred,
    EventTime,
    Granularity,
    Message,
    Record,
    Role,
    Turn,
    Unit,
    WindowClosed,
    WindowLevel,
    partition_key,
    unit_id_for,
)
from memstream.schemas.memory import FactType, Memory, MemoryKind, MemoryOp, MemoryUpdate, Triple
from memstream.schemas.topics import ALL_TOPICS, TopicSpec

__all__ = [
    "ALL_TOPICS",
    "ConsolidationRequest",
    "DeadLetter",
    "DeadLetterStage",
    "Deferred",
    "EventTime",
    "FactType",
    "Granularity",
    "Memory",
    "MemoryKind",
    "MemoryOp",
    "MemoryUpdate",
    "Message",
    "Record",
    "Role",
    "TopicSpec",
    "Triple",
    "Turn",
    "Unit",
    "WindowClosed",
    "WindowLevel",
    "partition_key",
    "unit_id_for",
]

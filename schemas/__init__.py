"""Contracts: the pydantic models of every topic record and the topic list."""

from schemas.events import (
    ConsolidationRequest,
    DeadLetter,
    DeadLetterStage,
    EventTime,
    Granularity,
    MemoryUpdate,
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
from schemas.topics import ALL_TOPICS, TopicSpec

__all__ = [
    "ALL_TOPICS",
    "ConsolidationRequest",
    "DeadLetter",
    "DeadLetterStage",
    "EventTime",
    "Granularity",
    "MemoryUpdate",
    "Message",
    "Record",
    "Role",
    "TopicSpec",
    "Turn",
    "Unit",
    "WindowClosed",
    "WindowLevel",
    "partition_key",
    "unit_id_for",
]

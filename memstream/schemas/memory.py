"""Consolidated memory: the records consolidators write and the ``memories`` collection holds.

Levels follow TiMem's Temporal Memory Tree, with RecMem's memories as leaves beside the units:

    level 1  unit (``units`` collection), episode, fact      -- leaves recall activates
             observation (what a speaker said in a turn, third person, dated; one per turn kept)
    level 2  session summary                                 -- children: the session's units
    level 3  day summary                                     -- children: the day's sessions
    level 4  week summary                                    -- children: the week's days
    level 5  profile (monthly), topic and persona (durative) -- children: the month's weeks / facts

Every memory carries semantic time: ``start``/``end`` is the interval it is about (for a fact, the
time it holds: valid from/to), ``recorded_at`` when memstream learnt it (the dialogue time of its
latest source), and ``expired_at`` when a later memory superseded it (bi-temporal, TSM/REMem).
Ids are deterministic (uuid5), so redelivered work rewrites the same memory.

Provenance separates what a memory states from what it covers: ``source_turn_ids`` are the turns
whose content its text carries (the turns of the sentences an extractive memory quotes, the ids
an LLM cited), ``covers_turn_ids`` every turn beneath it (a week node's whole subtree, all of an
episode's units). Recall and evaluation credit the first only.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import AwareDatetime, Field, model_validator

from memstream.schemas.events import Record, StoredIdentifier, TenantId, name_id, partition_key


class MemoryKind(StrEnum):
    EPISODE = "episode"
    FACT = "fact"
    OBSERVATION = "observation"
    SESSION = "session"
    DAY = "day"
    WEEK = "week"
    PROFILE = "profile"
    TOPIC = "topic"
    PERSONA = "persona"


LEVEL: dict[MemoryKind, int] = {
    MemoryKind.EPISODE: 1,
    MemoryKind.FACT: 1,
    MemoryKind.OBSERVATION: 1,
    MemoryKind.SESSION: 2,
    MemoryKind.DAY: 3,
    MemoryKind.WEEK: 4,
    MemoryKind.PROFILE: 5,
    MemoryKind.TOPIC: 5,
    MemoryKind.PERSONA: 5,
}


class FactType(StrEnum):
    USER_EVENT = "user_event"  # something that happened to / was done by the user
    PREFERENCE = "preference"  # likes, dislikes, constraints
    TIME_UPDATE = "time_update"  # a state that changed at a time (supersedes earlier facts)
    ENTITY_RELATION = "entity_relation"  # a relation between the user and a person, place, thing


class Triple(Record):
    subject: str = Field(min_length=1, max_length=256)
    predicate: str = Field(min_length=1, max_length=256)
    object: str = Field(min_length=1, max_length=1024)

    def normalized(self) -> str:
        parts = (self.subject, self.predicate, self.object)
        return "|".join(" ".join(part.lower().split()) for part in parts)


class Memory(Record):
    """One consolidated memory (a point in ``memories``)."""

    memory_id: str
    tenant: TenantId
    user_id: StoredIdentifier
    kind: MemoryKind
    level: int = Field(ge=1, le=5)
    text: str = Field(min_length=1)
    start: AwareDatetime = Field(description="start of the time it is about (valid from, for facts)")
    end: AwareDatetime | None = Field(description="end of that time, exclusive; None = still holds")
    recorded_at: AwareDatetime = Field(description="dialogue time of the latest source")
    expired_at: AwareDatetime | None = Field(default=None, description="when a later memory superseded it")
    superseded_by: str | None = None
    source_turn_ids: list[str] = Field(
        default_factory=list,
        description="provenance: the turns whose content its text carries (the sentences it quotes, or the"
        " ids an LLM cited); what recall and evaluation credit",
    )
    covers_turn_ids: list[str] = Field(
        default_factory=list,
        description="every turn beneath it (a tree node's subtree, an episode's or a cluster's turns);"
        " includes source_turn_ids. Absent from records written before it existed: then source_turn_ids",
    )
    sentence_turn_ids: list[list[str]] = Field(
        default_factory=list,
        description="extractive memories: the turns each sentence of the text quotes, in text order (as the"
        " extractive writer splits it), so a parent quoting one sentence credits that sentence's turns only;"
        " empty when unknown (LLM output)",
    )
    source_unit_ids: list[str] = Field(
        default_factory=list, description="episodes, facts and observations: the units of source_turn_ids"
    )
    children: list[str] = Field(default_factory=list, description="tree: the ids it was built from")
    parent_id: str | None = None
    triple: Triple | None = Field(default=None, description="facts only")
    fact_type: FactType | None = Field(default=None, description="facts only")
    window_id: str | None = Field(default=None, description="tree nodes: the closed window it summarises")
    request_ids: list[str] = Field(
        default_factory=list, description="episodes and facts: the recurrence requests folded into it"
    )
    extractive: bool = Field(description="written without an LLM (the extractive consolidator)")
    writer: str = Field(description="prompt name@version, or extractive@version")
    model: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _covers_default(cls, data: Any) -> Any:
        # Records written before covers_turn_ids existed named every turn beneath them as source.
        if isinstance(data, dict) and "covers_turn_ids" not in data:
            return {**data, "covers_turn_ids": data.get("source_turn_ids", [])}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Memory:
        if self.level != LEVEL[self.kind]:
            raise ValueError(f"a {self.kind.value} is level {LEVEL[self.kind]}, not {self.level}")
        if self.end is not None and self.end < self.start:
            raise ValueError("end is before start")
        if (self.kind == MemoryKind.FACT) != (self.triple is not None and self.fact_type is not None):
            raise ValueError("facts, and only facts, carry a triple and a fact_type")
        if not set(self.source_turn_ids) <= set(self.covers_turn_ids):
            raise ValueError("covers_turn_ids includes every source turn")
        return self

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.user_id)

    @property
    def current(self) -> bool:
        return self.expired_at is None


class MemoryOp(StrEnum):
    UPSERT = "upsert"
    INVALIDATE = "invalidate"
    DELETE = "delete"


class MemoryUpdate(Record):
    """One change to consolidated memory; the ``memories`` collection is a view of this log.

    upsert: ``memory`` is the whole record. invalidate: the memory ``memory_id`` stops holding at
    ``valid_to`` and expired at ``expired_at`` because of ``superseded_by`` (it is kept, for history).
    delete: the memory is removed."""

    op: MemoryOp
    memory_id: str
    tenant: TenantId
    user_id: StoredIdentifier
    memory: Memory | None = None
    valid_to: AwareDatetime | None = None
    expired_at: AwareDatetime | None = None
    superseded_by: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> MemoryUpdate:
        if self.op == MemoryOp.UPSERT and (self.memory is None or self.memory.memory_id != self.memory_id):
            raise ValueError("an upsert carries the memory with the same memory_id")
        if self.op == MemoryOp.INVALIDATE and self.expired_at is None:
            raise ValueError("an invalidate carries expired_at")
        return self

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.user_id)


def memory_id(*parts: str) -> str:
    """Deterministic id of a memory from what identifies it (kind, user, window, triple...)."""
    return name_id("/".join(parts))

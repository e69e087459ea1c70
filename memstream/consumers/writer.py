"""The writer protocol: what consolidators ask for, in plain data.

Consolidators (``consumers/recurrence.py``, ``consumers/tree.py``) load units and memories, decide
*what* to write (merge-first, which children, which facts to supersede) and turn drafts into
``Memory`` records. A writer only turns sources into text and structure. Two writers:

* ``memstream.consumers.extractive.ExtractiveWriter`` -- deterministic, offline, zero tokens (the default);
* ``memstream.consumers.llm_writer.LLMWriter`` -- prompts from ``memstream.core.prompts`` through the LLM
  client.

Both say what their text carries, apart from what it was written from: drafts name the units they
state (``source_ids``) and those they cover (``covers_ids``); summaries, profiles and durative
memory come back ``Written``, with the turns they quote or cite. Consolidators store the first as
``Memory.source_turn_ids`` and the whole subtree or cluster as ``covers_turn_ids``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypedDict
from zoneinfo import ZoneInfo

from memstream.schemas.events import EventTime, Unit
from memstream.schemas.memory import FactType, Memory, MemoryKind, Triple


@dataclass(frozen=True)
class Scope:
    """Whose memory is being written: for budgets, metrics, and dates in the user's zone."""

    tenant: str
    user_id: str
    zone: ZoneInfo


@dataclass(frozen=True)
class Source:
    """A unit or a memory handed to a writer. Lists of sources are in time order."""

    id: str  # unit_id or memory_id
    ts: datetime  # dialogue time (aware) of a unit; recorded_at of a memory
    text: str
    turn_ids: tuple[str, ...]  # the turns its text carries (a memory's source_turn_ids)
    event_times: tuple[EventTime, ...] = ()  # semantic time found in a unit's text
    start: datetime | None = None  # a memory's interval
    end: datetime | None = None
    sentence_turn_ids: tuple[tuple[str, ...], ...] = ()  # a memory's, when known (Memory.sentence_turn_ids)
    triple: Triple | None = None  # a fact's, so a writer restates it without parsing its text
    fact_type: FactType | None = None
    speakers: tuple[str, ...] = ()  # a unit's (Unit.speakers): who said its text, as sent, never parsed


@dataclass(frozen=True)
class Written:
    """A summary, profile, topic or persona, with the turns its text carries: the turns of the
    sentences it quotes (extractive), or of the sources the model cited (LLM; none when it cited
    no real source)."""

    text: str
    turn_ids: tuple[str, ...]
    sentence_turn_ids: tuple[tuple[str, ...], ...] = ()  # per sentence of ``text``, when known


@dataclass(frozen=True)
class EpisodeDraft:
    """A coherent narrative of some of the units, with explicit, anchored dates (never a bare
    "yesterday": relative expressions are resolved against the dialogue time)."""

    text: str
    start: datetime  # the event time it covers
    end: datetime
    source_ids: tuple[str, ...]  # the unit ids whose content the text carries (quoted, or cited)
    covers_ids: tuple[str, ...]  # the unit ids it was written from (non-empty; includes source_ids)
    sentence_turn_ids: tuple[tuple[str, ...], ...] = ()  # per sentence of ``text``, when known


@dataclass(frozen=True)
class FactDraft:
    """A fact the episode compressed away: a sentence and a time-scoped triple."""

    sentence: str
    triple: Triple
    fact_type: FactType
    valid_from: datetime
    valid_to: datetime | None
    source_ids: tuple[str, ...]  # unit ids it states (quoted, or cited; none when the model cited none)
    supersedes: tuple[str, ...] = ()  # memory ids of related facts this one invalidates


@dataclass(frozen=True)
class SummaryRequest:
    """A session, day or week summary to write: of ``children`` (units, sessions or days) over
    [start, end), with ``history`` the w most recent summaries of the same level for continuity, and
    ``said`` the turns below a day or a week (units, in time order) for a writer that tells them itself."""

    kind: MemoryKind
    start: datetime
    end: datetime
    children: Sequence[Source]
    history: Sequence[Source]
    said: Sequence[Source] = ()


@dataclass(frozen=True)
class ProfileRequest:
    """The monthly profile to write over [start, end): ``previous`` refined with what the month's weeks
    (``children``) add; ``said`` the month's turns (units), for a writer that reads traits from what
    people said themselves."""

    start: datetime
    end: datetime
    children: Sequence[Source]
    previous: Source | None
    said: Sequence[Source] = ()


class Writer(Protocol):
    model: str | None
    extractive: bool

    def label(self, stage: str) -> str:
        """What memories written at ``stage`` (episodes, merge, facts, summary, profile, durative)
        record as ``writer``: the prompt's name@version, or extractive@version."""

    async def episodes(
        self, scope: Scope, units: Sequence[Source], merge_into: Source | None
    ) -> list[EpisodeDraft]:
        """1-3 episodes of ``units``; with ``merge_into`` (the user's nearest episode, similar
        enough), exactly one: that episode rewritten to include the units."""

    async def facts(
        self, scope: Scope, episode: EpisodeDraft, units: Sequence[Source], related: Sequence[Memory]
    ) -> list[FactDraft]:
        """Facts in ``units`` that ``episode`` compressed away. ``related`` are the user's current
        facts nearest to the episode: an equivalent fact is not repeated, and a time-anchored update
        names the facts it supersedes."""

    async def summary(self, scope: Scope, request: SummaryRequest) -> Written:
        """The summary ``request`` asks for (``SummaryRequest``)."""

    async def profile(self, scope: Scope, request: ProfileRequest) -> Written:
        """The profile ``request`` asks for (``ProfileRequest``)."""

    async def durative(
        self, scope: Scope, month: datetime, cluster: Sequence[Source]
    ) -> tuple[Written, Written]:
        """A topic summary and a persona summary of one cluster of the month's facts (TSM)."""


class WriterStamp(TypedDict):
    """The fields of a ``Memory`` that say what wrote it."""

    extractive: bool
    writer: str
    model: str | None


def stamp(writer: Writer, stage: str) -> WriterStamp:
    """What a consolidator records on a memory ``writer`` wrote at ``stage``:
    ``Memory(..., **stamp(writer, stage))``."""
    return WriterStamp(extractive=writer.extractive, writer=writer.label(stage), model=writer.model)


def stamp_of(memory: Memory) -> WriterStamp:
    """The stamp of an existing memory, for a node that carries its one child's text (its header
    its own)."""
    return WriterStamp(extractive=memory.extractive, writer=memory.writer, model=memory.model)


def unit_source(unit: Unit) -> Source:
    return Source(
        id=unit.unit_id,
        ts=unit.ts,
        text=unit.text,
        turn_ids=(unit.turn_id,),
        event_times=tuple(unit.event_times),
        speakers=tuple(unit.speakers),
    )


def memory_source(memory: Memory) -> Source:
    return Source(
        id=memory.memory_id,
        ts=memory.recorded_at,
        text=memory.text,
        turn_ids=tuple(memory.source_turn_ids),
        start=memory.start,
        end=memory.end,
        sentence_turn_ids=tuple(tuple(t) for t in memory.sentence_turn_ids),
        triple=memory.triple,
        fact_type=memory.fact_type,
    )

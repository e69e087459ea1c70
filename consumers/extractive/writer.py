"""``ExtractiveWriter``: the extractive functions behind ``consumers.writer.Writer``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from consumers.extractive.episodes import episodes
from consumers.extractive.facts import facts
from consumers.extractive.summaries import durative, profile, summary
from consumers.writer import EpisodeDraft, FactDraft, Scope, Source, Written
from schemas.memory import Memory, MemoryKind

WRITER_NAME = "extractive@3"  # 2: provenance names the quoted turns only; 3: facts, profiles,
# topics and personas are dated third-person statements, episodes grouped by speaker without small talk


class ExtractiveWriter:
    """``consumers.writer.Writer`` over the package's functions: no LLM, no I/O, zero tokens."""

    model: str | None = None
    extractive = True  # and zero tokens: nothing here calls a model

    def label(self, stage: str) -> str:
        return WRITER_NAME  # one version for every stage: there is no prompt to tell apart

    async def episodes(
        self, scope: Scope, units: Sequence[Source], merge_into: Source | None
    ) -> list[EpisodeDraft]:
        return episodes(scope, units, merge_into)

    async def facts(
        self, scope: Scope, episode: EpisodeDraft, units: Sequence[Source], related: Sequence[Memory]
    ) -> list[FactDraft]:
        return facts(scope, episode, units, related)

    async def summary(
        self,
        scope: Scope,
        kind: MemoryKind,
        start: datetime,
        end: datetime,
        children: Sequence[Source],
        history: Sequence[Source],
    ) -> Written:
        return summary(scope, kind, start, end, children, history)

    async def profile(
        self,
        scope: Scope,
        start: datetime,
        end: datetime,
        children: Sequence[Source],
        previous: Source | None,
    ) -> Written:
        return profile(scope, start, end, children, previous)

    async def durative(
        self, scope: Scope, month: datetime, cluster: Sequence[Source]
    ) -> tuple[Written, Written]:
        return durative(scope, month, cluster)

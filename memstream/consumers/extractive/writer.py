"""``ExtractiveWriter``: the extractive functions behind ``memstream.consumers.writer.Writer``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from typing import TypeVar

from memstream.consumers.extractive.episodes import episodes
from memstream.consumers.extractive.facts import facts
from memstream.consumers.extractive.summaries import durative, profile, summary
from memstream.consumers.writer import EpisodeDraft, FactDraft, Scope, Source, Written
from memstream.schemas.memory import Memory, MemoryKind

T = TypeVar("T")

WRITER_NAME = "extractive@3"  # 2: provenance names the quoted turns only; 3: facts, profiles,
# topics and personas are dated third-person statements, episodes grouped by speaker without small talk


class ExtractiveWriter:
    """``memstream.consumers.writer.Writer`` over the package's functions: no LLM, no I/O, zero tokens.

    They are CPU work (TF-IDF, centrality: milliseconds to tens of them a call), run on one thread of
    the writer's own: on the worker's event loop they held up ingest and the recalls it answers (a
    recall waited for the summaries the loop was writing), and one thread leaves the other cores to
    them."""

    model: str | None = None
    extractive = True  # and zero tokens: nothing here calls a model

    def __init__(self) -> None:
        self._cpu = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extractive")

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._cpu, fn)

    def label(self, stage: str) -> str:
        return WRITER_NAME  # one version for every stage: there is no prompt to tell apart

    async def episodes(
        self, scope: Scope, units: Sequence[Source], merge_into: Source | None
    ) -> list[EpisodeDraft]:
        return await self._run(partial(episodes, scope, units, merge_into))

    async def facts(
        self, scope: Scope, episode: EpisodeDraft, units: Sequence[Source], related: Sequence[Memory]
    ) -> list[FactDraft]:
        return await self._run(partial(facts, scope, episode, units, related))

    async def summary(
        self,
        scope: Scope,
        kind: MemoryKind,
        start: datetime,
        end: datetime,
        children: Sequence[Source],
        history: Sequence[Source],
        said: Sequence[Source] = (),
    ) -> Written:
        return await self._run(partial(summary, scope, kind, start, end, children, history, said))

    async def profile(
        self,
        scope: Scope,
        start: datetime,
        end: datetime,
        children: Sequence[Source],
        previous: Source | None,
        said: Sequence[Source] = (),
    ) -> Written:
        return await self._run(partial(profile, scope, start, end, children, previous, said))

    async def durative(
        self, scope: Scope, month: datetime, cluster: Sequence[Source]
    ) -> tuple[Written, Written]:
        return await self._run(partial(durative, scope, month, cluster))

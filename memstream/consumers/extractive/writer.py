"""``ExtractiveWriter``: the extractive functions behind ``memstream.consumers.writer.Writer``."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Concatenate, ParamSpec, TypeVar

from memstream.consumers.extractive.episodes import episodes
from memstream.consumers.extractive.facts import facts
from memstream.consumers.extractive.summaries import durative, profile, summary

T = TypeVar("T")
P = ParamSpec("P")

WRITER_NAME = "extractive@3"  # 2: provenance names the quoted turns only; 3: facts, profiles,
# topics and personas are dated third-person statements, episodes grouped by speaker without small talk


def _on_thread(fn: Callable[P, T]) -> Callable[Concatenate[ExtractiveWriter, P], Coroutine[Any, Any, T]]:
    """The writer method of ``fn``: ``fn`` with the method's arguments, run on the writer's thread. The
    one dispatch of the writer's stages: their signatures are written once, on the functions (and
    declared once, on ``memstream.consumers.writer.Writer``, which mypy checks them against)."""

    async def method(self: ExtractiveWriter, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(partial(fn, *args, **kwargs))

    own = inspect.signature(fn).parameters.values()
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__signature__ = inspect.Signature([self_param, *own])  # type: ignore[attr-defined]
    method.__name__ = method.__qualname__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


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

    # The stages: each runs its function of the package on the writer's thread, with its signature.
    episodes = _on_thread(episodes)
    facts = _on_thread(facts)
    summary = _on_thread(summary)
    profile = _on_thread(profile)
    durative = _on_thread(durative)

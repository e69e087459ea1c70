"""Consumers of the pipeline's output topics (wired into the topology in ``streams/app.py``,
through ``streams/handlers.py``):

* ``recurrence`` -- ConsolidationRequest -> episodes and facts (RecMem);
* ``tree`` -- WindowClosed -> Temporal Memory Tree nodes, and durative memory monthly (TiMem, TSM);
* ``indexer`` -- memory.updates -> the ``memories`` collection (its single writer).

The text itself comes from a writer: the extractive one by default, the LLM one when
``MEMSTREAM_LLM_BASE_URL`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass

from memstream.adapters.llm import LLMClient
from memstream.adapters.settings import Settings
from memstream.consumers.indexer import Indexer
from memstream.consumers.recurrence import RecurrenceConsolidator
from memstream.consumers.tree import TreeSummarizer
from memstream.consumers.writer import Writer
from memstream.core.embedder import Embedder


@dataclass(frozen=True)
class Consolidation:
    writer: Writer
    recurrence: RecurrenceConsolidator
    tree: TreeSummarizer
    indexer: Indexer
    llm: LLMClient | None  # None: the extractive writer, no LLM


def build_consolidation(settings: Settings, embedder: Embedder, theta_sim: float) -> Consolidation:
    writer: Writer
    llm: LLMClient | None = None
    if settings.llm.llm_base_url:
        from memstream.consumers.llm_writer import LLMWriter

        llm = LLMClient(settings.llm)
        writer = LLMWriter(llm, settings.llm.llm_model)
    else:
        from memstream.consumers.extractive import ExtractiveWriter

        writer = ExtractiveWriter()
    return Consolidation(
        writer=writer,
        recurrence=RecurrenceConsolidator(embedder, writer, theta_sim),
        tree=TreeSummarizer(embedder, writer, settings.consolidation.observation_budget),
        indexer=Indexer(embedder),
        llm=llm,
    )

"""``memstream eval locomo``: evidence recall of memstream's recall at fixed context budgets.

Each LoCoMo conversation becomes one user (its two speakers as roles, each session's date_time as
dialogue time, turn ids = the dataset's dia_ids). The turns go through the ingest processor and
the consolidators (the configured writer; extractive without an LLM) on a fresh embedded store,
in process and in topic order, then every question is asked with ``now`` = the last session's
date. An evidence dia_id counts as recalled at a budget when an item returned within that budget
carries it in ``source_turn_ids``; tokens = characters / 4. The per-question items are written out
so the score can be recomputed independently.

Next to it, the same budgets filled by a flat baseline: every one of the user's units (raw exchanges)
scored 0.9 * cosine (same embedder) + 0.1 * BM25 over the user's units (``rank.leaf_scores`` with
``BASELINE_LAMBDA``, whatever weight recall itself uses), taken in score order, as many as fit. Note
for reading the numbers: a tree node
carries the turn ids of everything below it (a session summary names all the session's turns), so
a returned summary credits every evidence turn of its session, although its text keeps only some.
``leaves_only_evidence_recall`` is the stricter reading: only units, episodes and facts count.
Every figure is reported per category and over all questions ("all").
"""

from __future__ import annotations

import re
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
from tqdm import tqdm

from consumers import build_consolidation
from consumers.memories import memories_spec
from consumers.offline import consolidate_all, ingest_all
from memstream.datasets import locomo_turns, parse_locomo_time, session_numbers
from memstream.embedders import make_embedder
from memstream.embedders.base import Embedder
from memstream.recall import rank
from memstream.recall.engine import recall, unit_item
from memstream.settings import Settings
from memstream.store.base import Filter, SearchQuery, VectorStore
from memstream.store.shards import EdgeShards
from memstream.units import UNITS, USER_FIELD
from schemas.events import partition_key
from streams.ingest import IngestProcessor, units_spec

BASELINE_LAMBDA = 0.9  # the flat baseline: 0.9 * cosine + 0.1 * BM25, whatever recall's own weight
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@dataclass(frozen=True)
class Question:
    user_key: str
    text: str
    evidence: tuple[str, ...]
    category: int


def questions(path: Path, tenant: str = "locomo") -> tuple[list[Question], dict[str, Any]]:
    """The questions, and each user's asking time (the last session's date)."""
    data = orjson.loads(path.read_bytes())
    out: list[Question] = []
    now: dict[str, Any] = {}
    for sample in data:
        key = partition_key(tenant, sample["sample_id"])
        conv = sample["conversation"]
        last = session_numbers(conv)[-1]
        now[key] = parse_locomo_time(conv[f"session_{last}_date_time"]) + timedelta(days=1)
        for qa in sample["qa"]:
            # A few evidence strings are malformed ("D8:6; D9:17"): read every D<n>:<m> in them.
            evidence = tuple(e for raw in qa.get("evidence", []) for e in re.findall(r"D\d+:\d+", raw))
            if evidence:
                out.append(Question(key, qa["question"], evidence, int(qa["category"])))
    return out, now


async def build_memory(settings: Settings, embedder: Embedder, path: Path) -> EdgeShards:
    """Ingest and consolidate the whole file on a fresh store under ``settings.data_dir``."""
    shards = EdgeShards(settings.data_dir / "store", [units_spec(embedder.dim), memories_spec(embedder.dim)])
    processor = IngestProcessor(settings, embedder, shards)
    events = await ingest_all(processor, locomo_turns(path), settings.batch_size)
    await consolidate_all(build_consolidation(settings, embedder, processor.theta_sim), shards.get(0), events)
    return shards


async def evaluate(
    settings: Settings, path: Path, budgets: Sequence[int], progress: bool = True
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memstream-eval-") as tmp:
        settings = settings.model_copy(update={"data_dir": Path(tmp)})
        embedder = make_embedder(settings)
        shards = await build_memory(settings, embedder, path)
        asked, now = questions(path)
        per_question = []
        hits: dict[int, dict[str, list[float]]] = {b: defaultdict(list) for b in budgets}
        flat: dict[int, dict[str, list[float]]] = {b: defaultdict(list) for b in budgets}
        leaves: dict[int, dict[str, list[float]]] = {b: defaultdict(list) for b in budgets}
        for q in tqdm(asked, desc="questions", disable=not progress):
            category = CATEGORIES[q.category]
            flat_ranked = flat_hybrid_ranking(shards.get(0), embedder, q)
            row: dict[str, Any] = {
                "question": q.text,
                "category": q.category,
                "evidence": q.evidence,
                "budgets": {},
            }
            for budget in budgets:
                result = recall(
                    shards.get(0),
                    embedder,
                    user_key=q.user_key,
                    query=q.text,
                    now=now[q.user_key],
                    budget_tokens=budget,
                )
                returned = {t for item, _ in result.items for t in item.source_turn_ids}
                share = _share(q, returned)
                # Stricter: only leaves (units, episodes, facts), whose provenance is their own text.
                leaf_turns = {t for item, _ in result.items if item.level == 1 for t in item.source_turn_ids}
                for cat in (category, "all"):
                    hits[budget][cat].append(share)
                    leaves[budget][cat].append(_share(q, leaf_turns))
                    flat[budget][cat].append(_share(q, fill(flat_ranked, budget)))
                row["budgets"][str(budget)] = {
                    "recall": share,
                    "items": [
                        {
                            "kind": i.kind,
                            "tokens": rank.tokens(i.text),
                            "source_turn_ids": list(i.source_turn_ids),
                        }
                        for i, _ in result.items
                    ],
                }
            per_question.append(row)
        shards.close()
    return {
        "data": str(path),
        "embedder": settings.embedder,
        "writer": "llm" if settings.llm_base_url else "extractive",
        "questions": len(asked),
        "evidence_recall": _means(hits),
        "leaves_only_evidence_recall": _means(leaves),
        "flat_hybrid_units_evidence_recall": _means(flat),
        "per_question": per_question,
    }


def flat_hybrid_ranking(store: VectorStore, embedder: Embedder, q: Question) -> list[rank.Item]:
    """The baseline's order: all of the user's units by 0.9 * cosine + 0.1 * BM25 (BM25 normalised over
    the user's units); ties by id."""
    vector = embedder.embed([q.text])[0]
    flt = Filter(equals={USER_FIELD: q.user_key})
    everything = max(store.count(UNITS, flt), 1)
    hits = store.search_many(UNITS, [SearchQuery(vector, everything, flt)])[0]
    units = [unit_item(h.payload, h.score) for h in hits]
    scored = list(zip(units, rank.leaf_scores(units, q.text, BASELINE_LAMBDA), strict=True))
    return [u for u, _ in rank.top(scored, len(scored))]


def fill(ranked: Sequence[rank.Item], budget: int) -> set[str]:
    """The turn ids of the items taken in order, skipping any that does not fit what is left."""
    turns: set[str] = set()
    spent = 0
    for item in ranked:
        cost = rank.tokens(item.text)
        if spent + cost > budget:
            continue
        spent += cost
        turns.update(item.source_turn_ids)
    return turns


def _share(q: Question, turns: set[str]) -> float:
    return sum(e in turns for e in q.evidence) / len(q.evidence)


def _means(by_budget: dict[int, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    return {
        str(b): {cat: round(statistics.mean(v), 4) for cat, v in sorted(by_cat.items())}
        for b, by_cat in by_budget.items()
    }

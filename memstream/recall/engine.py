"""Recall over one user's store: the thin shell around the pure steps of ``time_intent`` and ``rank``.

1. time intent (TSM) and complexity plan (TiMem);
2. leaf candidates: the user's units, episodes and current facts nearest the query (dense), scored
   λ·cosine + (1-λ)·BM25 and cut to the plan's leaf budget;
3. hierarchical propagation: each leaf's ancestors (a unit's session is the node listing it as a
   child; sessions, days, weeks and profiles follow ``parent_id``), within per-level budgets;
4. facts valid at the asked time (superseded ones only for questions about change);
5. temporal rerank, gating to ``budget_tokens``, ordering, and a rendered context with dates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt

from consumers.memories import KIND_FIELD, MEMORIES, memory_from_payload
from memstream.embedders.base import Embedder
from memstream.recall import rank
from memstream.recall.time_intent import TimeIntent, contains, distance, parse_time_intent
from memstream.store.base import Filter, SearchQuery, VectorStore
from memstream.units import UNITS, USER_FIELD, unit_from_payload
from schemas.memory import Memory, MemoryKind

CANDIDATES = 40  # nearest candidates fetched per kind before BM25 and the leaf budget
LEAF_KINDS = (MemoryKind.EPISODE, MemoryKind.FACT)


@dataclass(frozen=True)
class Recalled:
    items: list[rank.Scored]  # in presentation order
    context: str
    intent: TimeIntent
    complexity: rank.Complexity


def recall(
    store: VectorStore,
    embedder: Embedder,
    *,
    user_key: str,
    query: str,
    now: datetime,
    budget_tokens: int = 1000,
    zone: ZoneInfo | None = None,
) -> Recalled:
    zone = zone or ZoneInfo("UTC")
    now = now if now.tzinfo else now.replace(tzinfo=zone)
    intent = parse_time_intent(query, now)
    complexity = rank.plan_complexity(query, bool(intent.intervals))
    vector = embedder.embed([query])[0]

    leaves = _candidates(store, vector, user_key)
    activated = rank.activate(leaves, query, complexity)
    by_id = _ancestors(store, user_key, [item for item, _ in activated])
    linked = [(_with_parent(item, by_id), score) for item, score in activated]
    scored = rank.propagate(linked, by_id, complexity)

    # Superseded facts only for questions about change; an event fact is not "invalid" because it
    # ended, so no point-in-time filter here: the temporal rerank orders by the asked interval.
    scored = rank.keep_valid(scored, intent.asks_change, None)

    def closeness(item: rank.Item) -> float:
        return distance(intent, item.start, item.end)

    scored = rank.temporal_rerank(
        scored, inside=lambda i: contains(intent, i.start, i.end), distance=closeness
    )
    kept = rank.gate(scored, budget_tokens)
    # TiMem's leaf budget caps activation, not the context: budget left over goes to the next-best
    # leaves (raw evidence beats a summary's paraphrase when there is room for both).
    spare = budget_tokens - sum(rank.tokens(i.text) for i, _ in kept)
    chosen = {i.id for i, _ in kept}
    ranked_leaves = rank.temporal_rerank(
        list(zip(leaves, rank.leaf_scores(leaves, query), strict=True)),
        inside=lambda i: contains(intent, i.start, i.end),
        distance=closeness,
    )
    for item, score in rank.keep_valid(ranked_leaves, intent.asks_change, None):
        cost = rank.tokens(item.text)
        if item.id not in chosen and cost <= spare:
            kept.append((item, score))
            chosen.add(item.id)
            spare -= cost
    selected = rank.order(kept, closeness)
    return Recalled(selected, rank.render_context(selected, zone), intent, complexity)


def _candidates(store: VectorStore, vector: npt.NDArray[np.float32], user_key: str) -> list[rank.Item]:
    queries = [SearchQuery(vector, CANDIDATES, Filter(equals={USER_FIELD: user_key}))]
    queries += [
        SearchQuery(vector, CANDIDATES, Filter(equals={USER_FIELD: user_key, KIND_FIELD: k.value}))
        for k in LEAF_KINDS
    ]
    units_hits = store.search_many(UNITS, queries[:1])[0]
    memory_hits = store.search_many(MEMORIES, queries[1:])
    items = [_unit_item(h.payload, h.score) for h in units_hits]
    items += [item_of(memory_from_payload(h.payload), h.score) for hits in memory_hits for h in hits]
    return items


def _ancestors(store: VectorStore, user_key: str, leaves: Sequence[rank.Item]) -> dict[str, rank.Item]:
    """Every tree node above the leaves, by id: a unit's session by its ``children``, then up the
    ``parent_id`` chain; a fact's episode by its ``parent_id``."""
    by_id: dict[str, rank.Item] = {}
    frontier: set[str] = set()
    for leaf in leaves:
        if leaf.kind == "unit":
            hits, _ = store.scroll(MEMORIES, Filter(equals={USER_FIELD: user_key, "children": leaf.id}), 4)
            for h in hits:
                node = item_of(memory_from_payload(h.payload), 0.0)
                by_id[node.id] = node
                frontier.add(node.parent_id or "")
        elif leaf.parent_id:
            frontier.add(leaf.parent_id)
    frontier.discard("")
    while frontier:
        found = [
            item_of(memory_from_payload(h.payload), 0.0) for h in store.retrieve(MEMORIES, sorted(frontier))
        ]
        by_id.update((n.id, n) for n in found)
        frontier = {n.parent_id for n in found if n.parent_id and n.parent_id not in by_id}
    return by_id


def _with_parent(item: rank.Item, by_id: dict[str, rank.Item]) -> rank.Item:
    """A unit's parent is the session node that lists it (units carry no link themselves)."""
    if item.kind != "unit":
        return item
    session = next((n for n in by_id.values() if item.id in n.children), None)
    if session is None:
        return item
    return rank.Item(**{**item.__dict__, "parent_id": session.id})


def _unit_item(payload: dict[str, Any], score: float) -> rank.Item:
    unit = unit_from_payload(payload)
    return rank.Item(
        id=unit.unit_id,
        kind="unit",
        level=1,
        text=unit.text,
        start=unit.ts,
        end=None,
        recorded_at=unit.ts,
        source_turn_ids=(unit.turn_id,),
        dense=score,
    )


def item_of(memory: Memory, score: float) -> rank.Item:
    return rank.Item(
        id=memory.memory_id,
        kind=memory.kind.value,
        level=memory.level,
        text=memory.text,
        start=memory.start,
        end=memory.end,
        recorded_at=memory.recorded_at,
        source_turn_ids=tuple(memory.source_turn_ids),
        parent_id=memory.parent_id,
        children=tuple(memory.children),
        current=memory.current,
        dense=score,
    )

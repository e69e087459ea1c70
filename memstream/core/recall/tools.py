"""REMem's agent tools over one user's memory: a pure core on plain ``rank.Item``s, and a thin store shell.

The core (``in_time``, ``entity_filter``, ``order_and_page``, ``lexical_rank``, ``contexts``) has no store,
embedder or clock. The shell reads one user's points and calls it; every read is filtered by
``USER_FIELD == user_key`` (and hits are checked again), so a tool never returns another user's data.

Time semantics (``in_time``). An item's time is the half-open interval [start, end). A unit (end None) is an
instant, as recall's ``time_intent`` reads it. A fact with end None still holds (``Memory.end``): its
interval runs on without end. The window [bound_start, bound_end) may be open on either side:

* overlaps: the item shares a moment with the window (an instant: lies in it);
* within: the item lies entirely inside the window (an unended fact only when the window has no end);
* before: the item ends by the window's earliest bound (an instant: strictly before it);
* after: the item starts at or after the window's latest bound;

so "before X" and "after X" need only one bound. No bounds: every item matches; an item without a start
never matches a window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from memstream.core.embedder import Embedder
from memstream.core.memories import KIND_FIELD, MEMORIES, memory_from_payload
from memstream.core.recall import rank
from memstream.core.recall.engine import item_of, unit_item
from memstream.core.store import Filter, Hit, SearchQuery, VectorStore, scroll_all
from memstream.core.units import UNITS, USER_FIELD
from memstream.schemas.memory import Memory, MemoryKind, Triple
from memstream.schemas.tools import (
    TOOLS,
    FindEntityContexts,
    FindMemoryContexts,
    LexicalRetrieve,
    OrderBy,
    Relation,
    SemanticRetrieve,
    TimeOp,
    ToolItem,
    ToolResult,
)

CANDIDATE_FACTOR = 5  # nearest candidates fetched per result when a time window will drop some


# --- pure core ----------------------------------------------------------------------------------------------


def in_time(
    start: datetime | None,
    end: datetime | None,
    bound_start: datetime | None,
    bound_end: datetime | None,
    op: TimeOp,
    *,
    open_end: bool = False,
) -> bool:
    """Whether an item dated [start, end) relates to the window [bound_start, bound_end) by ``op``.

    end None is an instant, or with ``open_end`` an interval without end; the semantics are in the module
    docstring. Datetimes must be aware."""
    earliest = bound_start if bound_start is not None else bound_end
    latest = bound_end if bound_end is not None else bound_start
    if earliest is None or latest is None:  # no window: time does not filter
        return True
    if start is None:
        return False
    instant = (end is None and not open_end) or (end is not None and end <= start)
    if op == "before":
        return start < earliest if instant else end is not None and end <= earliest
    if op == "after":
        return start >= latest
    if instant:  # within and overlaps agree on an instant
        return (bound_start is None or bound_start <= start) and (bound_end is None or start < bound_end)
    if op == "within":
        return (bound_start is None or bound_start <= start) and (
            bound_end is None or (end is not None and end <= bound_end)
        )
    return (bound_end is None or start < bound_end) and (
        bound_start is None or end is None or bound_start < end
    )


def item_in_time(
    item: rank.Item, bound_start: datetime | None, bound_end: datetime | None, op: TimeOp
) -> bool:
    """``in_time`` for an item: only a fact's missing end means "still holds"."""
    start, end = rank.event_interval(item)  # a unit: when what it tells happened, as the item shows it
    return in_time(start, end, bound_start, bound_end, op, open_end=item.kind == MemoryKind.FACT)


def _matches(value: str, needle: str | None) -> bool:
    return needle is None or needle.casefold() in value.casefold()


def entity_filter(
    memories: Iterable[Memory],
    *,
    subject: str | None = None,
    predicate: str | None = None,
    obj: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    op: TimeOp = "overlaps",
    include_superseded: bool = False,
) -> list[Memory]:
    """The facts whose triple contains each given part (case-insensitive substring), whose validity
    interval relates to [start, end) by ``op``, and that still hold unless ``include_superseded``."""
    return [
        m
        for m in memories
        if m.triple is not None
        and (include_superseded or m.current)
        and _matches(m.triple.subject, subject)
        and _matches(m.triple.predicate, predicate)
        and _matches(m.triple.object, obj)
        and in_time(m.start, m.end, start, end, op, open_end=True)
    ]


def order_and_page(items: Sequence[rank.Item], order_by: OrderBy, offset: int, limit: int) -> list[rank.Item]:
    """``items`` ordered by start or recorded_at ('-' prefix: newest first), ties by id, then
    ``items[offset : offset + limit]``."""
    field = order_by.removeprefix("-")
    key: Callable[[rank.Item], datetime] = (
        (lambda i: i.start) if field == "start" else (lambda i: i.recorded_at)
    )
    # Sorting by id first makes ties deterministic in both directions (sorted is stable under reverse).
    ordered = sorted(sorted(items, key=lambda i: i.id), key=key, reverse=order_by.startswith("-"))
    return ordered[offset : offset + limit]


def lexical_rank(items: Sequence[rank.Item], query: str, limit: int) -> list[rank.Scored]:
    """The top ``limit`` items by BM25 against ``query`` (the items are the corpus), ties by id; items
    sharing no term with the query are left out."""
    scored = zip(items, rank.bm25_scores(query, [i.text for i in items]), strict=True)
    return sorted(((i, s) for i, s in scored if s > 0), key=lambda p: (-p[1], p[0].id))[:limit]


@dataclass(frozen=True)
class Contexts:
    node: rank.Item
    parent: rank.Item | None
    children: list[rank.Item]
    before: list[rank.Item]  # chronological, the nearest last
    after: list[rank.Item]  # chronological, the nearest first


def contexts(node: rank.Item, nodes: Sequence[rank.Item], neighbours: int) -> Contexts:
    """``node``'s place among one user's ``nodes``.

    Parent: ``parent_id``, or for a unit (which carries no link) the node listing it as a child. Children:
    the ids in ``children`` in their order, then the nodes naming it as parent (a fact's episode), by start.
    Neighbours: up to ``neighbours`` nodes of the same kind on each side, by (start, id)."""
    by_id = {n.id: n for n in nodes}
    parent = by_id.get(node.parent_id) if node.parent_id else None
    if parent is None and node.kind == "unit":
        parent = next((n for n in nodes if node.id in n.children), None)
    listed = [by_id[c] for c in node.children if c in by_id]
    listed_ids = {c.id for c in listed}
    adopted = sorted(
        (n for n in nodes if n.parent_id == node.id and n.id not in listed_ids), key=lambda n: (n.start, n.id)
    )
    here = (node.start, node.id)
    same = sorted((n for n in nodes if n.kind == node.kind), key=lambda n: (n.start, n.id))
    earlier = [n for n in same if (n.start, n.id) < here]
    later = [n for n in same if (n.start, n.id) > here]
    before = earlier[max(0, len(earlier) - neighbours) :]
    return Contexts(node, parent, [*listed, *adopted], before, later[:neighbours])


# --- store shell --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Corpus:
    """One user's items, and the triples of its facts (``rank.Item`` carries none)."""

    items: list[rank.Item]
    triples: dict[str, Triple]


def _own(hits: Iterable[Hit], user_key: str) -> list[Hit]:
    # The filters already scope every read to the user; checking again costs nothing and keeps tenant
    # isolation from resting on one adapter translating filters correctly.
    return [h for h in hits if h.payload.get(USER_FIELD) == user_key]


def _corpus(unit_hits: Iterable[tuple[Hit, float]], memory_hits: Iterable[tuple[Hit, float]]) -> _Corpus:
    items = [unit_item(h.payload, score) for h, score in unit_hits]
    triples: dict[str, Triple] = {}
    for h, score in memory_hits:
        memory = memory_from_payload(h.payload)
        items.append(item_of(memory, score))
        if memory.triple is not None:
            triples[memory.memory_id] = memory.triple
    return _Corpus(items, triples)


def _user_filter(user_key: str) -> Filter:
    return Filter(equals={USER_FIELD: user_key})


def _scan(store: VectorStore, user_key: str, kinds: Sequence[str] | None = None) -> _Corpus:
    """Every item of the user, of ``kinds`` when given."""
    wanted = set(kinds) if kinds else None
    units = (
        _own(scroll_all(store, UNITS, _user_filter(user_key)), user_key)
        if not wanted or "unit" in wanted
        else []
    )
    memories = [
        h
        for h in _own(scroll_all(store, MEMORIES, _user_filter(user_key)), user_key)
        if not wanted or h.payload.get(KIND_FIELD) in wanted
    ]
    return _corpus(((h, 0.0) for h in units), ((h, 0.0) for h in memories))


def _tool_item(
    item: rank.Item,
    triples: Mapping[str, Triple],
    score: float | None = None,
    relation: Relation | None = None,
) -> ToolItem:
    start, end = rank.event_interval(item)
    return ToolItem.model_validate(
        {
            "id": item.id,
            "kind": item.kind,
            "level": item.level,
            "text": item.text,
            "start": start,
            "end": end,
            "recorded_at": item.recorded_at,
            "source_turn_ids": list(item.source_turn_ids),
            "covers_turn_ids": list(item.covers_turn_ids),
            "score": score,
            "parent_id": item.parent_id,
            "children": list(item.children),
            "triple": triples.get(item.id),
            "current": item.current,
            "relation": relation,
        }
    )


def _search(
    store: VectorStore,
    vector: npt.NDArray[np.float32],
    user_key: str,
    kinds: Sequence[str] | None,
    fetch: int,
) -> _Corpus:
    """The user's ``fetch`` nearest units and ``fetch`` nearest memories of each asked kind."""
    user = _user_filter(user_key)
    unit_hits = (
        store.search_many(UNITS, [SearchQuery(vector, fetch, user)])[0]
        if not kinds or "unit" in kinds
        else []
    )
    if kinds:
        memory_kinds = sorted({k for k in kinds if k != "unit"})
        flts = [Filter(equals={USER_FIELD: user_key, KIND_FIELD: k}) for k in memory_kinds]
    else:
        flts = [user]
    batches = store.search_many(MEMORIES, [SearchQuery(vector, fetch, f) for f in flts]) if flts else []
    return _corpus(
        ((h, h.score) for h in _own(unit_hits, user_key)),
        ((h, h.score) for hits in batches for h in _own(hits, user_key)),
    )


def semantic_retrieve(
    store: VectorStore, embedder: Embedder, user_key: str, args: SemanticRetrieve
) -> ToolResult:
    """The nearest items to the query by cosine, in the time window; ``total`` is unknown (None)."""
    windowed = args.start is not None or args.end is not None
    fetch = args.limit * CANDIDATE_FACTOR if windowed else args.limit
    corpus = _search(store, embedder.embed([args.query])[0], user_key, args.kinds, fetch)
    kept = [i for i in corpus.items if item_in_time(i, args.start, args.end, args.time_op)]
    ranked = sorted(kept, key=lambda i: (-i.dense, i.id))[: args.limit]
    return ToolResult(items=[_tool_item(i, corpus.triples, i.dense) for i in ranked])


def lexical_retrieve(
    store: VectorStore, embedder: Embedder, user_key: str, args: LexicalRetrieve
) -> ToolResult:
    """BM25 over the user's items of the asked kinds in the time window (the embedder is unused)."""
    corpus = _scan(store, user_key, args.kinds)
    kept = [i for i in corpus.items if item_in_time(i, args.start, args.end, args.time_op)]
    ranked = lexical_rank(kept, args.query, args.limit)
    return ToolResult(items=[_tool_item(i, corpus.triples, s) for i, s in ranked])


def find_memory_contexts(
    store: VectorStore, embedder: Embedder, user_key: str, args: FindMemoryContexts
) -> ToolResult:
    """The node, its parent, children and time neighbours, in that order, each with its ``relation``.
    An unknown id and another user's id give the same answer: no items."""
    corpus = _scan(store, user_key)
    node = next((i for i in corpus.items if i.id == args.memory_id), None)
    if node is None:
        return ToolResult(items=[], total=0)
    ctx = contexts(node, corpus.items, args.neighbours)
    related: list[tuple[rank.Item, Relation]] = [(node, "node")]
    related += [(ctx.parent, "parent")] if ctx.parent is not None else []
    related += [(c, "child") for c in ctx.children]
    related += [(b, "before") for b in ctx.before]
    related += [(a, "after") for a in ctx.after]
    return ToolResult(
        items=[_tool_item(i, corpus.triples, relation=r) for i, r in related], total=len(related)
    )


def find_entity_contexts(
    store: VectorStore, embedder: Embedder, user_key: str, args: FindEntityContexts
) -> ToolResult:
    """The user's matching facts, ordered and paged (``total``: matches before paging), or only their
    ``count`` for aggregate='count' (the embedder is unused)."""
    hits = _own(
        scroll_all(store, MEMORIES, Filter(equals={USER_FIELD: user_key, KIND_FIELD: "fact"})), user_key
    )
    facts = entity_filter(
        (memory_from_payload(h.payload) for h in hits),
        subject=args.subject,
        predicate=args.predicate,
        obj=args.object,
        start=args.start,
        end=args.end,
        op=args.time_op,
        include_superseded=args.include_superseded,
    )
    if args.aggregate == "count":
        return ToolResult(items=[], total=len(facts), count=len(facts))
    triples = {m.memory_id: m.triple for m in facts if m.triple is not None}
    page = order_and_page([item_of(m, 0.0) for m in facts], args.order_by, args.offset, args.limit)
    return ToolResult(items=[_tool_item(i, triples) for i in page], total=len(facts))


_Runner = Callable[[VectorStore, Embedder, str, Any], ToolResult]
RUNNERS: dict[str, _Runner] = {
    "semantic_retrieve": semantic_retrieve,
    "lexical_retrieve": lexical_retrieve,
    "find_memory_contexts": find_memory_contexts,
    "find_entity_contexts": find_entity_contexts,
}


def run_tool(
    name: str, arguments: Mapping[str, Any] | str, store: VectorStore, embedder: Embedder, user_key: str
) -> ToolResult:
    """Run the tool ``name`` for ``user_key``. ``arguments`` is the call's argument object, or its JSON text
    as an LLM returns it. Raises ``ValueError`` on an unknown tool, pydantic's ``ValidationError`` (also a
    ValueError) on bad arguments."""
    model = TOOLS.get(name)
    runner = RUNNERS.get(name)
    if model is None or runner is None:
        raise ValueError(f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}")
    args = (
        model.model_validate_json(arguments)
        if isinstance(arguments, str)
        else model.model_validate(arguments)
    )
    return runner(store, embedder, user_key, args)

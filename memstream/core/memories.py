"""The ``memories`` collection: its spec, payload layout, and the reads that consolidation and
recall share (core: the write path and the read path both import it).

Only the indexer (``consumers/indexer.py``) writes it. Payload: flat fields for filters
(``user_key``, ``tenant``, ``kind``, ``current`` 1/0, ``start_epoch``/``end_epoch``,
``recorded_epoch``, ``request_ids``, ``children``) and the whole ``Memory`` as JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memstream.core.embedder import Vectors
from memstream.core.store import CollectionSpec, Filter, Range, SearchQuery, VectorStore
from memstream.core.units import TENANT_FIELD, USER_FIELD
from memstream.schemas.memory import Memory, MemoryKind, MemoryOp, MemoryUpdate

MEMORIES = "memories"
KIND_FIELD = "kind"
CURRENT_FIELD = "current"  # 1 while it holds, 0 once superseded (Edge filters reject booleans)
MEMORY_FIELD = "memory"
ID_FIELD = "memory_id"  # deletes go by filter: the store protocol deletes by filter only


def memories_spec(dim: int) -> CollectionSpec:
    return CollectionSpec(
        name=MEMORIES,
        dim=dim,
        keyword_fields=(USER_FIELD, KIND_FIELD, ID_FIELD, "request_ids", "children"),
        numeric_fields=("start_epoch", CURRENT_FIELD),
        tenant_field=TENANT_FIELD,
    )


def memory_payload(memory: Memory) -> dict[str, Any]:
    return {
        USER_FIELD: memory.key,
        ID_FIELD: memory.memory_id,
        TENANT_FIELD: memory.tenant,
        KIND_FIELD: memory.kind.value,
        CURRENT_FIELD: int(memory.current),
        "level": memory.level,
        "start_epoch": memory.start.timestamp(),
        "end_epoch": (memory.end or memory.start).timestamp(),
        "recorded_epoch": memory.recorded_at.timestamp(),
        "request_ids": memory.request_ids,
        "children": memory.children,
        "text": memory.text,
        MEMORY_FIELD: memory.to_bytes().decode(),
    }


def memory_from_payload(payload: dict[str, Any]) -> Memory:
    return Memory.model_validate_json(payload[MEMORY_FIELD])


def stored_vectors(
    store: VectorStore, ids: Sequence[str | None], texts: Sequence[str]
) -> list[Vectors | None]:
    """For each ``ids[i]``, the vector the store holds for that memory if its text is ``texts[i]``
    (the indexer stores the vector of each memory's text); None where it has none or another text,
    or the id is None."""
    wanted = [i for i in ids if i is not None]
    hits = {h.id: h for h in store.retrieve(MEMORIES, wanted, with_vectors=True)} if wanted else {}
    out: list[Vectors | None] = []
    for i, text in zip(ids, texts, strict=True):
        hit = hits.get(i) if i is not None else None
        out.append(hit.vector if hit is not None and hit.payload.get("text") == text else None)
    return out


def current_of_user(user_key: str, kind: MemoryKind) -> Filter:
    """The user's memories of ``kind`` that still hold."""
    return Filter(equals={USER_FIELD: user_key, KIND_FIELD: kind.value, CURRENT_FIELD: 1})


def in_period(user_key: str, kind: MemoryKind, start: datetime, end: datetime) -> Filter:
    return Filter(
        equals={USER_FIELD: user_key, KIND_FIELD: kind.value},
        ranges={"start_epoch": Range(gte=start.timestamp(), lt=end.timestamp())},
    )


def nearest(store: VectorStore, vector: Any, flt: Filter, limit: int) -> list[tuple[float, Memory]]:
    hits = store.search_many(MEMORIES, [SearchQuery(vector, limit, flt)])[0]
    return [(h.score, memory_from_payload(h.payload)) for h in hits]


def upsert(memory: Memory) -> MemoryUpdate:
    return MemoryUpdate(
        op=MemoryOp.UPSERT,
        memory_id=memory.memory_id,
        tenant=memory.tenant,
        user_id=memory.user_id,
        memory=memory,
    )


def union(*lists: Sequence[str]) -> list[str]:
    """Ordered union, first occurrence wins."""
    return list(dict.fromkeys(i for items in lists for i in items))

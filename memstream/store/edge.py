"""Qdrant Edge adapter: the embedded default, one on-disk shard (segments + WAL) per collection.

Thread-safety: an ``EdgeShard`` may be shared between threads (two query and two upsert threads on one
shard ran without errors or wrong results). Every Edge call holds the GIL for its whole duration, though,
so calls never overlap and ``asyncio.to_thread`` does not free the event loop while one runs: keep
batches small (upserting 256 points holds it ~4 ms, at worst ~25 ms, at 100k points). Only the
registry of open shards takes a lock here.

One process per shard directory: a second open fails with "Can't init WAL: WouldBlock".
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    HasIdCondition,
    KeywordIndexParams,
    MatchValue,
    PayloadSchemaType,
    PayloadSelector,
    Query,
    QueryBatchRequest,
    QueryRequest,
    RangeFloat,
    ScrollRequest,
    UpdateOperation,
)
from qdrant_edge import Filter as EdgeFilter
from qdrant_edge import Point as EdgePoint

from memstream.store.base import CollectionSpec, Filter, Hit, Point, SearchQuery

if TYPE_CHECKING:
    from qdrant_edge import ConditionType, PointId


@dataclass(frozen=True)
class _Collection:
    shard: EdgeShard
    dim: int


class EdgeStore:
    def __init__(self, root: Path) -> None:
        self._root = root
        self._root.mkdir(parents=True, exist_ok=True)
        self._collections: dict[str, _Collection] = {}
        self._lock = threading.Lock()  # guards opening/closing, so a shard is never opened twice

    def ensure_collection(self, spec: CollectionSpec) -> None:
        with self._lock:
            coll = self._collections.get(spec.name)
            if coll is None:
                coll = _Collection(self._open(spec), spec.dim)
                self._collections[spec.name] = coll
            elif coll.dim != spec.dim:
                raise ValueError(f"collection {spec.name!r} is open with dim {coll.dim}, not {spec.dim}")
            _ensure_indexes(coll.shard, spec)

    def _open(self, spec: CollectionSpec) -> EdgeShard:
        path = self._root / spec.name
        config = EdgeConfig(vectors=EdgeVectorParams(size=spec.dim, distance=Distance.Cosine))
        if not path.exists():
            return EdgeShard.create(str(path), config)
        try:
            # Passing the config makes Edge check it against the stored segments.
            return EdgeShard.load(str(path), config)
        except Exception as exc:
            # Edge raises a bare Exception for every failure; if the shard opens without our config,
            # the config was the problem (not, say, another process holding the WAL).
            if not _opens_as_stored(path):
                raise
            raise ValueError(
                f"collection {spec.name!r} at {path} does not match the spec (dim {spec.dim}, cosine): {exc}"
            ) from exc

    def _shard(self, collection: str) -> EdgeShard:
        try:
            return self._collections[collection].shard
        except KeyError:
            raise LookupError(f"collection {collection!r} is not open (ensure_collection first)") from None

    def upsert(self, collection: str, points: Sequence[Point]) -> None:
        if points:
            edge_points = [EdgePoint(p.id, p.vector.tolist(), p.payload) for p in points]
            self._shard(collection).update(UpdateOperation.upsert_points(edge_points))

    def retrieve(self, collection: str, ids: Sequence[str]) -> list[Hit]:
        if not ids:
            return []
        records = self._shard(collection).retrieve(_id_list(ids), True, False)
        return [Hit(str(r.id), 0.0, r.payload or {}) for r in records]

    def search_many(self, collection: str, queries: Sequence[SearchQuery]) -> list[list[Hit]]:
        if not queries:
            return []
        requests = [
            QueryRequest(
                limit=q.limit,
                query=Query.Nearest(q.vector.tolist()),
                filter=_to_edge(q.flt),
                with_payload=_selector(q.with_payload),
            )
            for q in queries
        ]
        # One planned batch shares a pass over the segments: ~40 us a query instead of ~60.
        results = self._shard(collection).query_batch(QueryBatchRequest(requests))
        return [[Hit(str(p.id), p.score, p.payload or {}) for p in points] for points in results]

    def set_payload(self, collection: str, ids: Sequence[str], values: Mapping[str, Any]) -> None:
        if ids:
            self._shard(collection).update(UpdateOperation.set_payload(_id_list(ids), dict(values)))

    def count(self, collection: str, flt: Filter | None = None) -> int:
        return self._shard(collection).count(CountRequest(exact=True, filter=_to_edge(flt)))

    def scroll(
        self, collection: str, flt: Filter | None, limit: int, offset: str | None = None
    ) -> tuple[list[Hit], str | None]:
        request = ScrollRequest(
            offset=offset, limit=limit, filter=_to_edge(flt), with_payload=True, with_vector=False
        )
        records, next_offset = self._shard(collection).scroll(request)
        hits = [Hit(str(r.id), 0.0, r.payload or {}) for r in records]
        return hits, None if next_offset is None else str(next_offset)

    def delete(self, collection: str, flt: Filter) -> None:
        # An empty filter matches every point, as it does on the Qdrant server.
        operation = UpdateOperation.delete_points_by_filter(_to_edge(flt) or EdgeFilter())
        self._shard(collection).update(operation)

    def optimize(self, collection: str) -> bool:
        """Build HNSW and merge segments; blocks for tens of seconds at 100k points. Offline use only."""
        return self._shard(collection).optimize()

    def close(self) -> None:
        with self._lock:
            for coll in self._collections.values():
                coll.shard.flush()
                coll.shard.close()
            self._collections.clear()


def _ensure_indexes(shard: EdgeShard, spec: CollectionSpec) -> None:
    existing = set(shard.info().payload_schema)
    wanted: dict[str, KeywordIndexParams | PayloadSchemaType] = {}
    if spec.tenant_field is not None:
        wanted[spec.tenant_field] = KeywordIndexParams(is_tenant=True)
    for name in spec.keyword_fields:
        wanted.setdefault(name, PayloadSchemaType.Keyword)
    for name in spec.numeric_fields:
        wanted.setdefault(name, PayloadSchemaType.Float)
    for name, schema in wanted.items():
        if name not in existing:
            shard.update(UpdateOperation.create_field_index(name, schema))


def _opens_as_stored(path: Path) -> bool:
    try:
        EdgeShard.load(str(path)).close()
    except Exception:
        return False
    return True


def _selector(with_payload: bool | Sequence[str]) -> bool | PayloadSelector:
    return with_payload if isinstance(with_payload, bool) else PayloadSelector.Include(list(with_payload))


def _id_list(ids: Sequence[str]) -> list[PointId]:
    # qdrant_edge's list parameters are invariant in PointId, so a list[str] does not type-check.
    return list(ids)


def _to_edge(flt: Filter | None) -> EdgeFilter | None:
    if flt is None:
        return None
    must: list[ConditionType] = [FieldCondition(key, match=MatchValue(v)) for key, v in flt.equals.items()]
    must += [FieldCondition(key, range=RangeFloat(gte=r.gte, lt=r.lt)) for key, r in flt.ranges.items()]
    excluded: set[PointId] = set(flt.exclude_ids)
    must_not: list[ConditionType] = [HasIdCondition(excluded)] if excluded else []
    if not must and not must_not:
        return None
    return EdgeFilter(must=must or None, must_not=must_not or None)

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
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    FieldCondition,
    HasIdCondition,
    KeywordIndexParams,
    MatchValue,
    Modifier,
    MultiVectorComparator,
    MultiVectorConfig,
    PayloadSchemaType,
    PayloadSelector,
    Prefetch,
    Query,
    QueryBatchRequest,
    QueryRequest,
    RangeFloat,
    ScrollRequest,
    UpdateOperation,
)
from qdrant_edge import Filter as EdgeFilter
from qdrant_edge import Point as EdgePoint
from qdrant_edge import SparseVector as EdgeSparseVector

from memstream.core.store import (
    CollectionSpec,
    Filter,
    Hit,
    Point,
    SearchQuery,
    SparseVector,
    hit_of,
    vectors_of,
    warn_dense_only,
)

if TYPE_CHECKING:
    from qdrant_edge import ConditionType, PointId, ScoredPoint


@dataclass(frozen=True)
class _Collection:
    shard: EdgeShard
    dim: int
    sparse: str | None  # the sparse vector's name; None: a shard made without one answers dense-only
    multi: str | None  # the multivector's name, None: none


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
                shard, sparse = self._open(spec)
                coll = _Collection(shard, spec.dim, sparse, spec.multivector)
                self._collections[spec.name] = coll
            elif coll.dim != spec.dim:
                raise ValueError(f"collection {spec.name!r} is open with dim {coll.dim}, not {spec.dim}")
            elif coll.multi is None and spec.multivector is not None:
                raise ValueError(_without_multivector(spec, str(self._root / spec.name), None))
            _ensure_indexes(coll.shard, spec)

    def _open(self, spec: CollectionSpec) -> tuple[EdgeShard, str | None]:
        path = self._root / spec.name
        config = _config(spec.dim, spec.sparse_vector, spec.multivector)
        if not path.exists():
            return EdgeShard.create(str(path), config), spec.sparse_vector
        try:
            # Passing the config makes Edge check it against the stored segments.
            return EdgeShard.load(str(path), config), spec.sparse_vector
        except Exception as exc:
            if spec.sparse_vector is not None:
                # A shard made before the collection had a sparse vector: Edge cannot add one to its
                # segments, so it keeps answering dense-only until it is rebuilt.
                try:
                    shard = EdgeShard.load(str(path), _config(spec.dim, None, spec.multivector))
                except Exception:
                    pass
                else:
                    warn_dense_only(spec.name, spec.sparse_vector)
                    return shard, None
            # Edge raises a bare Exception for every failure; if the shard opens without our config,
            # the config was the problem (not, say, another process holding the WAL).
            if not _opens_as_stored(path):
                raise
            if spec.multivector is not None:
                raise ValueError(_without_multivector(spec, str(path), exc)) from exc
            raise ValueError(
                f"collection {spec.name!r} at {path} does not match the spec (dim {spec.dim}, cosine): {exc}"
            ) from exc

    def _collection(self, collection: str) -> _Collection:
        try:
            return self._collections[collection]
        except KeyError:
            raise LookupError(f"collection {collection!r} is not open (ensure_collection first)") from None

    def _shard(self, collection: str) -> EdgeShard:
        return self._collection(collection).shard

    def upsert(self, collection: str, points: Sequence[Point]) -> None:
        if points:
            coll = self._collection(collection)
            edge_points = [
                EdgePoint(p.id, vectors_of(p, coll.sparse, coll.multi, _edge_sparse, _floats), p.payload)
                for p in points
            ]
            coll.shard.update(UpdateOperation.upsert_points(edge_points))

    def retrieve(self, collection: str, ids: Sequence[str], with_vectors: bool = False) -> list[Hit]:
        if not ids:
            return []
        coll = self._collection(collection)
        # [""]: the unnamed dense vector (as a list), not the sparse one beside it; and the multivector.
        names = ["", coll.multi] if coll.multi is not None else [""]
        records = coll.shard.retrieve(_id_list(ids), True, names if with_vectors else False)
        return [hit_of(r, with_vector=with_vectors, multi=coll.multi) for r in records]

    def search_many(self, collection: str, queries: Sequence[SearchQuery]) -> list[list[Hit]]:
        return [[hit_of(p, p.score) for p in points] for points in self._query_batch(collection, queries)]

    def search_ids(self, collection: str, queries: Sequence[SearchQuery]) -> list[list[tuple[str, float]]]:
        return [[(str(p.id), p.score) for p in points] for points in self._query_batch(collection, queries)]

    def _query_batch(self, collection: str, queries: Sequence[SearchQuery]) -> list[list[ScoredPoint]]:
        if not queries:
            return []
        sparse = self._collection(collection).sparse
        requests = [_request(q, sparse) for q in queries]
        # One planned batch shares a pass over the segments: ~40 us a query instead of ~60.
        return self._shard(collection).query_batch(QueryBatchRequest(requests))

    def set_payload(self, collection: str, ids: Sequence[str], values: Mapping[str, Any]) -> None:
        if ids:
            self._shard(collection).update(UpdateOperation.set_payload(_id_list(ids), dict(values)))

    def count(self, collection: str, flt: Filter | None = None) -> int:
        shard = self._shard(collection)
        if flt is None:
            # The segments' own point counts (deleted and overwritten points excluded). An exact count
            # visits every point, ~90 ns each with the GIL held: 0.1-0.3 s of a worker's event loop per
            # /status call at a million users.
            return int(shard.info().points_count)
        return shard.count(CountRequest(exact=True, filter=_to_edge(flt)))

    def scroll(
        self, collection: str, flt: Filter | None, limit: int, offset: str | None = None
    ) -> tuple[list[Hit], str | None]:
        request = ScrollRequest(
            offset=offset, limit=limit, filter=_to_edge(flt), with_payload=True, with_vector=False
        )
        records, next_offset = self._shard(collection).scroll(request)
        hits = [hit_of(r) for r in records]
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


def _config(dim: int, sparse: str | None, multi: str | None) -> EdgeConfig:
    dense = EdgeVectorParams(size=dim, distance=Distance.Cosine)
    vectors: EdgeVectorParams | dict[str, EdgeVectorParams] = dense
    if multi is not None:
        maxsim = MultiVectorConfig(MultiVectorComparator.MaxSim)
        vectors = {
            "": dense,
            multi: EdgeVectorParams(size=dim, distance=Distance.Cosine, multivector_config=maxsim),
        }
    if sparse is None:
        return EdgeConfig(vectors=vectors)
    return EdgeConfig(vectors=vectors, sparse_vectors={sparse: EdgeSparseVectorParams(modifier=Modifier.Idf)})


def _without_multivector(spec: CollectionSpec, path: str, exc: Exception | None) -> str:
    """Why a collection made without the multivector its spec names cannot be opened, and what to do."""
    return (
        f"collection {spec.name!r} at {path} was made without its {spec.multivector!r} multivector (by an "
        f"older memstream); it cannot be converted in place: stop memstream and delete that directory "
        f"(units stored before keep answering recall by their whole-turn vectors), or replay the "
        f"conversations into a fresh MEMSTREAM_DATA_DIR (docs/memory-model.md, stores made before unit "
        f"views were multivectors)" + ("" if exc is None else f": {exc}")
    )


def _floats(vector: npt.NDArray[np.float32]) -> list[float]:
    # The array's buffer as a memoryview (ndarray.data) rather than .tolist(): Edge reads any sequence of
    # floats, and this one yields the same float32 values without a list of Python floats first (a
    # 384-dim vector: ~3.5 us instead of ~6; ingest converts three to five of them a turn).
    return cast("list[float]", vector.data)


def _edge_sparse(vector: SparseVector) -> EdgeSparseVector:
    return EdgeSparseVector(list(vector.indices), list(vector.values))


def _request(q: SearchQuery, sparse: str | None) -> QueryRequest:
    # A multivector is searched with a query of one row: MaxSim is then its best row's cosine.
    dense = Query.Nearest([_floats(q.vector)] if q.using else _floats(q.vector), using=q.using)
    flt = _to_edge(q.flt)
    lexical = q.lexical() if sparse is not None else None
    if lexical is None:
        return QueryRequest(limit=q.limit, query=dense, filter=flt, with_payload=_selector(q.with_payload))
    # The union of both prefetches is rescored by the dense query rather than fused (RRF, DBSF): recall
    # scores each candidate by its cosine and by BM25 over the candidates (rank.leaf_scores), so it needs
    # the union and every hit's cosine. Rescoring at most limit + sparse_limit prefetched points gives both
    # in one request; a fusion's rank-based scores would need each hit's vector sent back to get them.
    prefetches = [
        Prefetch(limit=q.limit, query=dense, filter=flt),
        Prefetch(limit=q.sparse_limit, query=Query.Nearest(_edge_sparse(lexical), using=sparse), filter=flt),
    ]
    return QueryRequest(
        limit=q.limit + q.sparse_limit,
        prefetches=prefetches,
        query=dense,
        filter=flt,
        with_payload=_selector(q.with_payload),
    )


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

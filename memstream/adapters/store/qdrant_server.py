"""Qdrant server adapter (production) over ``qdrant-client``; REST or gRPC, whichever the client uses.

Outages (connection errors, timeouts, 5xx, 408/429, gRPC UNAVAILABLE and the like) become
``StoreUnavailable`` so callers pause and retry; every other error propagates unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import grpc
import httpx
import numpy as np
import numpy.typing as npt
import pydantic
from qdrant_client import QdrantClient, models
from qdrant_client.common.client_exceptions import ResourceExhaustedResponse
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from memstream.core.store import (
    CollectionSpec,
    Filter,
    Hit,
    Point,
    SearchQuery,
    SparseVector,
    StoreUnavailable,
    hit_of,
    vectors_of,
    warn_dense_only,
)

_RETRYABLE_HTTP = frozenset({408, 429})
_RETRYABLE_GRPC = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
    }
)


@contextmanager
def _outage_as_unavailable() -> Iterator[None]:
    try:
        yield
    except ResponseHandlingException as exc:
        # The client wraps transport failures in it, but also response parse errors: those are a
        # client/server version mismatch that retrying never fixes.
        if isinstance(exc.source, pydantic.ValidationError):
            raise
        raise StoreUnavailable(f"qdrant unreachable: {exc.source!r}") from exc
    except (httpx.TransportError, ResourceExhaustedResponse) as exc:
        raise StoreUnavailable(f"qdrant unreachable: {exc!r}") from exc
    except UnexpectedResponse as exc:
        code = exc.status_code
        if code is not None and (code >= 500 or code in _RETRYABLE_HTTP):
            raise StoreUnavailable(f"qdrant answered {code}") from exc
        raise
    except grpc.RpcError as exc:
        if exc.code() in _RETRYABLE_GRPC:
            raise StoreUnavailable(f"qdrant gRPC {exc.code()}") from exc
        raise


class QdrantServerStore:
    def __init__(self, client: QdrantClient) -> None:
        self._client = client
        # Each ensured collection's sparse vector name; None (or not ensured here): dense-only.
        self._sparse: dict[str, str | None] = {}
        self._multi: dict[str, str | None] = {}  # each ensured collection's multivector name

    @classmethod
    def from_url(cls, url: str, api_key: str | None = None, timeout_s: int = 10) -> QdrantServerStore:
        return cls(QdrantClient(url=url, api_key=api_key, timeout=timeout_s))

    def ensure_collection(self, spec: CollectionSpec) -> None:
        with _outage_as_unavailable():
            if not self._client.collection_exists(spec.name):
                self._create(spec)
            info = self._client.get_collection(spec.name)
            params = info.config.params.vectors
            dense = params.get("") if isinstance(params, Mapping) else params
            if not (
                isinstance(dense, models.VectorParams)
                and dense.size == spec.dim
                and dense.distance == models.Distance.COSINE
            ):
                raise ValueError(
                    f"collection {spec.name!r} does not match the spec (dim {spec.dim}, cosine): {params}"
                )
            if spec.multivector is not None and not (
                isinstance(params, Mapping) and spec.multivector in params
            ):
                raise ValueError(
                    f"collection {spec.name!r} was made without its {spec.multivector!r} multivector (by an "
                    "older memstream); it cannot be converted in place: delete the collection (units stored "
                    "before keep answering recall by their whole-turn vectors), or replay the conversations "
                    "into fresh collections (docs/memory-model.md, stores made before unit views were "
                    "multivectors)"
                )
            self._multi[spec.name] = spec.multivector
            # A collection created before it had a sparse vector keeps answering dense-only.
            stored = info.config.params.sparse_vectors or {}
            self._sparse[spec.name] = spec.sparse_vector if spec.sparse_vector in stored else None
            if spec.sparse_vector is not None and spec.sparse_vector not in stored:
                warn_dense_only(spec.name, spec.sparse_vector)
            wanted: dict[str, models.PayloadSchemaType | models.KeywordIndexParams] = {}
            if spec.tenant_field is not None:
                wanted[spec.tenant_field] = models.KeywordIndexParams(
                    type=models.KeywordIndexType.KEYWORD, is_tenant=True
                )
            for name in spec.keyword_fields:
                wanted.setdefault(name, models.PayloadSchemaType.KEYWORD)
            for name in spec.numeric_fields:
                wanted.setdefault(name, models.PayloadSchemaType.FLOAT)
            for name, schema in wanted.items():
                if name not in info.payload_schema:
                    self._client.create_payload_index(spec.name, name, schema)

    def _create(self, spec: CollectionSpec) -> None:
        try:
            sparse = (
                None
                if spec.sparse_vector is None
                else {spec.sparse_vector: models.SparseVectorParams(modifier=models.Modifier.IDF)}
            )
            dense = models.VectorParams(size=spec.dim, distance=models.Distance.COSINE)
            vectors: models.VectorParams | dict[str, models.VectorParams] = dense
            if spec.multivector is not None:
                maxsim = models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM)
                multi = models.VectorParams(
                    size=spec.dim, distance=models.Distance.COSINE, multivector_config=maxsim
                )
                vectors = {"": dense, spec.multivector: multi}
            self._client.create_collection(spec.name, vectors_config=vectors, sparse_vectors_config=sparse)
        except UnexpectedResponse as exc:
            if exc.status_code != 409:  # 409: another process created it in the meantime
                raise

    def upsert(self, collection: str, points: Sequence[Point]) -> None:
        if not points:
            return
        sparse, multi = self._sparse.get(collection), self._multi.get(collection)
        structs = [
            models.PointStruct(
                id=p.id, vector=vectors_of(p, sparse, multi, _qdrant_sparse, _floats), payload=p.payload
            )
            for p in points
        ]
        with _outage_as_unavailable():
            self._client.upsert(collection, structs)

    def retrieve(self, collection: str, ids: Sequence[str], with_vectors: bool = False) -> list[Hit]:
        if not ids:
            return []
        with _outage_as_unavailable():
            # All vectors: a point with a sparse vector has its dense one under "" (dense_of picks it).
            records = self._client.retrieve(
                collection, list(ids), with_payload=True, with_vectors=with_vectors
            )
        return [hit_of(r, with_vector=with_vectors, multi=self._multi.get(collection)) for r in records]

    def search_many(self, collection: str, queries: Sequence[SearchQuery]) -> list[list[Hit]]:
        if not queries:
            return []
        sparse = self._sparse.get(collection)
        requests = [_request(q, sparse) for q in queries]
        with _outage_as_unavailable():
            responses = self._client.query_batch_points(collection, requests)
        return [[hit_of(p, p.score) for p in r.points] for r in responses]

    def search_ids(self, collection: str, queries: Sequence[SearchQuery]) -> list[list[tuple[str, float]]]:
        return [[(h.id, h.score) for h in hits] for hits in self.search_many(collection, queries)]

    def set_payload(self, collection: str, ids: Sequence[str], values: Mapping[str, Any]) -> None:
        if not ids:
            return
        with _outage_as_unavailable():
            self._client.set_payload(collection, dict(values), list(ids))

    def count(self, collection: str, flt: Filter | None = None) -> int:
        with _outage_as_unavailable():
            return self._client.count(collection, _to_qdrant(flt), exact=True).count

    def scroll(
        self, collection: str, flt: Filter | None, limit: int, offset: str | None = None
    ) -> tuple[list[Hit], str | None]:
        with _outage_as_unavailable():
            records, next_offset = self._client.scroll(
                collection, _to_qdrant(flt), limit=limit, offset=offset, with_payload=True
            )
        hits = [hit_of(r) for r in records]
        return hits, None if next_offset is None else str(next_offset)

    def delete(self, collection: str, flt: Filter) -> None:
        selector = models.FilterSelector(filter=_to_qdrant(flt) or models.Filter())
        with _outage_as_unavailable():
            self._client.delete(collection, selector)

    def close(self) -> None:
        self._client.close()


def _floats(vector: npt.NDArray[np.float32]) -> list[float]:
    return vector.tolist()  # qdrant-client's models validate lists of floats


def _qdrant_sparse(vector: SparseVector) -> models.SparseVector:
    return models.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _request(q: SearchQuery, sparse: str | None) -> models.QueryRequest:
    flt = _to_qdrant(q.flt)
    # A multivector is searched with a query of one row: MaxSim is then its best row's cosine.
    query = [q.vector.tolist()] if q.using else q.vector.tolist()
    with_payload = q.with_payload if isinstance(q.with_payload, bool) else list(q.with_payload)
    lexical = q.lexical() if sparse is not None else None
    if lexical is None:
        return models.QueryRequest(
            query=query, using=q.using, filter=flt, limit=q.limit, with_payload=with_payload
        )
    # The prefetches' union is rescored by the dense query, not fused: see
    # memstream.adapters.store.edge._request.
    prefetch = [
        models.Prefetch(query=query, using=q.using, filter=flt, limit=q.limit),
        models.Prefetch(query=_qdrant_sparse(lexical), using=sparse, filter=flt, limit=q.sparse_limit),
    ]
    return models.QueryRequest(
        prefetch=prefetch,
        query=query,
        using=q.using,
        filter=flt,
        limit=q.limit + q.sparse_limit,
        with_payload=with_payload,
    )


def _to_qdrant(flt: Filter | None) -> models.Filter | None:
    if flt is None:
        return None
    must: list[models.Condition] = [
        models.FieldCondition(key=k, match=models.MatchValue(value=v)) for k, v in flt.equals.items()
    ]
    must += [
        models.FieldCondition(key=k, range=models.Range(gte=r.gte, lt=r.lt)) for k, r in flt.ranges.items()
    ]
    must_not: list[models.Condition] = (
        [models.HasIdCondition(has_id=list(flt.exclude_ids))] if flt.exclude_ids else []
    )
    if not must and not must_not:
        return None
    return models.Filter(must=must or None, must_not=must_not or None)

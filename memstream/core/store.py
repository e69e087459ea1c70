"""The vector store protocol. Adapters: Qdrant Edge (embedded), Qdrant server (qdrant-client), and the
HTTP ``RemoteStore`` in front of another process's Edge shard.

Filters and sparse vectors are plain data so callers never import an adapter's types.

Lexical search: a collection whose spec names a ``sparse_vector`` holds, besides each point's dense
vector, a sparse one (``memstream.core.lexical``; the store applies the IDF). A query that carries a sparse
vector gets the union of the dense top ``limit`` and the sparse top ``sparse_limit``, each hit scored by
its dense cosine. A collection created without the sparse vector keeps answering dense-only: its points'
sparse vectors are dropped on upsert and sparse queries are ignored (Qdrant Edge will not open a
shard with a vector its segments lack; rebuilding the collection is how an old store gets one:
docs/memory-model.md).

Multivectors: a collection whose spec names a ``multivector`` holds, besides each point's dense vector,
a set of vectors (``Point.multi``, one row each) compared MaxSim: a query naming it (``SearchQuery.using``)
scores a point by its row nearest the query, as a cosine. A point is one item with several sides (a
unit's sentences) for the price of one point and one payload.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

log = logging.getLogger("memstream")


@dataclass(frozen=True)
class Range:
    gte: float | None = None
    lt: float | None = None


@dataclass(frozen=True)
class Filter:
    """All conditions must hold: ``equals`` field == value, ``ranges`` numeric bounds,
    ``exclude_ids`` points left out. No booleans in ``equals``: store flags as int or keyword."""

    equals: Mapping[str, str | int] = field(default_factory=dict)
    ranges: Mapping[str, Range] = field(default_factory=dict)
    exclude_ids: Sequence[str] = ()

    def __post_init__(self) -> None:
        # Qdrant Edge 0.9 turns MatchValue(True) into 1, which never matches a stored boolean; bool is an
        # int to the type checker, so only a runtime check keeps both adapters answering the same.
        for key, value in self.equals.items():
            if isinstance(value, bool):
                raise TypeError(f"Filter.equals[{key!r}] is a bool; store flags as int or keyword")


@dataclass(frozen=True)
class SparseVector:
    """Non-zero dimensions, ascending and distinct, and their values."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.indices) != len(self.values):
            raise ValueError(f"{len(self.indices)} indices but {len(self.values)} values")


@dataclass(frozen=True)
class Point:
    id: str  # a UUID string
    vector: npt.NDArray[np.float32]
    payload: dict[str, Any]
    sparse: SparseVector | None = None  # stored where the collection has a sparse vector
    # Rows stored as the collection's multivector (``CollectionSpec.multivector``); at least one row there.
    multi: npt.NDArray[np.float32] | None = None


@dataclass(frozen=True)
class Hit:
    id: str
    score: float  # cosine similarity
    payload: dict[str, Any]
    # The stored dense vector, only from ``retrieve(..., with_vectors=True)``; None otherwise. Cosine
    # collections store vectors L2-normalised, so it is the upserted vector scaled to unit length.
    vector: npt.NDArray[np.float32] | None = None
    # Its multivector's rows (L2-normalised), likewise only from ``retrieve(..., with_vectors=True)``.
    multi: npt.NDArray[np.float32] | None = None


@dataclass(frozen=True)
class SearchQuery:
    vector: npt.NDArray[np.float32]
    limit: int
    flt: Filter
    # True, False, or the payload fields to return: reading less payload makes a search cheaper.
    with_payload: bool | Sequence[str] = True
    # Lexical candidates: the sparse top ``sparse_limit`` join the dense top ``limit`` (see the module doc).
    sparse: SparseVector | None = None
    sparse_limit: int = 0
    # The collection's multivector to search instead of its dense vector (None: the dense one).
    using: str | None = None

    def lexical(self) -> SparseVector | None:
        """The sparse query to run, None when there is none (no terms, or no sparse candidates asked)."""
        if self.sparse is None or not self.sparse.indices or self.sparse_limit <= 0:
            return None
        return self.sparse


@dataclass(frozen=True)
class CollectionSpec:
    name: str
    dim: int
    keyword_fields: Sequence[str] = ()  # exact-match indexes (user, session, ...)
    numeric_fields: Sequence[str] = ()  # range indexes (epoch seconds)
    tenant_field: str | None = None  # indexed as the tenant partition where the backend supports it
    sparse_vector: str | None = None  # name of the sparse (lexical, IDF-weighted) vector, None = dense only
    multivector: str | None = None  # name of the MaxSim multivector beside the dense one, None = none


def search(
    store: VectorStore,
    collection: str,
    vector: npt.NDArray[np.float32],
    limit: int,
    flt: Filter,
    with_payload: bool | Sequence[str] = True,
) -> list[Hit]:
    """One search: a batch of one."""
    return store.search_many(collection, [SearchQuery(vector, limit, flt, with_payload)])[0]


def scroll_all(store: VectorStore, collection: str, flt: Filter | None = None, page: int = 1000) -> list[Hit]:
    """Every point matching ``flt`` (payload only), page by page."""
    out: list[Hit] = []
    offset: str | None = None
    while True:
        hits, offset = store.scroll(collection, flt, page, offset)
        out.extend(hits)
        if offset is None:
            return out


def vectors_of(
    point: Point,
    sparse: str | None,
    multi: str | None,
    sparse_as: Callable[[SparseVector], Any],
    dense_as: Callable[[npt.NDArray[np.float32]], Any],
) -> Any:
    """``point``'s vectors as Qdrant takes them (Edge and qdrant-client alike): its dense vector alone,
    or under ``""`` beside the collection's named sparse vector (``sparse_as`` converts it) and
    multivector (a list of rows), those of them that the collection and the point have. ``dense_as``
    converts the dense vector and each multivector row."""
    dense = dense_as(point.vector)
    named: dict[str, Any] = {}
    if sparse is not None and point.sparse is not None:
        named[sparse] = sparse_as(point.sparse)
    if multi is not None and point.multi is not None:
        named[multi] = [dense_as(row) for row in point.multi]
    return {"": dense, **named} if named else dense


def multi_of(stored: object, name: str | None) -> npt.NDArray[np.float32] | None:
    """The multivector ``name`` of a point as Qdrant returns it (a name -> vector mapping); None if absent."""
    rows = stored.get(name) if name is not None and isinstance(stored, Mapping) else None
    return np.asarray(rows, dtype=np.float32) if isinstance(rows, list) and rows else None


def dense_of(stored: object) -> npt.NDArray[np.float32] | None:
    """The unnamed dense vector of a point as Qdrant returns it (Edge and qdrant-client alike): a
    list of floats, or in a name -> vector mapping under ``""`` beside the sparse vector; None if absent."""
    if isinstance(stored, Mapping):
        stored = stored.get("")
    if not isinstance(stored, list) or not stored or not isinstance(stored[0], float):
        return None
    return np.asarray(stored, dtype=np.float32)


class StoredPoint(Protocol):
    """A point as Qdrant returns it, Edge and qdrant-client alike."""

    @property
    def id(self) -> object: ...
    @property
    def payload(self) -> dict[str, Any] | None: ...
    @property
    def vector(self) -> object: ...


def hit_of(
    point: StoredPoint, score: float = 0.0, with_vector: bool = False, multi: str | None = None
) -> Hit:
    """``point`` as a hit: its ``score`` when a search found it, its dense vector when asked for, and its
    multivector ``multi`` when asked for and the collection has one."""
    if not with_vector:
        return Hit(str(point.id), score, point.payload or {})
    return Hit(
        str(point.id), score, point.payload or {}, dense_of(point.vector), multi_of(point.vector, multi)
    )


def warn_dense_only(collection: str, sparse: str) -> None:
    log.warning(
        "collection %r has no sparse vector %r (made before it had one): its searches use dense "
        "candidates only; replay into a fresh store to add it (docs/memory-model.md, stores made before "
        "units had a sparse vector)",
        collection,
        sparse,
    )


class StoreUnavailable(RuntimeError):
    """The store could not be reached; callers pause and retry, they never skip input."""


@runtime_checkable
class VectorStore(Protocol):
    def ensure_collection(self, spec: CollectionSpec) -> None:
        """Create the collection and its payload indexes if missing (idempotent)."""

    def upsert(self, collection: str, points: Sequence[Point]) -> None: ...

    def retrieve(self, collection: str, ids: Sequence[str], with_vectors: bool = False) -> list[Hit]:
        """Points by id (score 0.0) with payload, and with their dense vector (and multivector, where the
        collection has one) where ``with_vectors``; unknown ids are left out."""

    def search_many(self, collection: str, queries: Sequence[SearchQuery]) -> list[list[Hit]]:
        """For each query, the top ``limit`` points by cosine among those matching its filter, plus,
        where the query and the collection have a sparse vector, the top ``sparse_limit`` by sparse
        score; every hit scored by its cosine, best first. The queries are planned as one batch."""

    def search_ids(self, collection: str, queries: Sequence[SearchQuery]) -> list[list[tuple[str, float]]]:
        """``search_many``'s hits as (id, score) pairs, best first: for a caller that reads nothing else
        (ingest's neighbour check, once a turn), without a ``Hit`` and its payload for every point."""

    def set_payload(self, collection: str, ids: Sequence[str], values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the payload of each point."""

    def count(self, collection: str, flt: Filter | None = None) -> int: ...

    def scroll(
        self, collection: str, flt: Filter | None, limit: int, offset: str | None = None
    ) -> tuple[list[Hit], str | None]:
        """A page of points (payload only) and the offset of the next page, None at the end."""

    def delete(self, collection: str, flt: Filter) -> None: ...

    def close(self) -> None: ...

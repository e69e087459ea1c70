"""The vector store protocol. Adapters: Qdrant Edge (embedded) and Qdrant server (qdrant-client).

Filters are plain data so callers never import an adapter's types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt


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
class Point:
    id: str  # a UUID string
    vector: npt.NDArray[np.float32]
    payload: dict[str, Any]


@dataclass(frozen=True)
class Hit:
    id: str
    score: float  # cosine similarity
    payload: dict[str, Any]


@dataclass(frozen=True)
class SearchQuery:
    vector: npt.NDArray[np.float32]
    limit: int
    flt: Filter
    # True, False, or the payload fields to return: reading less payload makes a search cheaper.
    with_payload: bool | Sequence[str] = True


@dataclass(frozen=True)
class CollectionSpec:
    name: str
    dim: int
    keyword_fields: Sequence[str] = ()  # exact-match indexes (user, session, ...)
    numeric_fields: Sequence[str] = ()  # range indexes (epoch seconds)
    tenant_field: str | None = None  # indexed as the tenant partition where the backend supports it


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


class StoreUnavailable(RuntimeError):
    """The store could not be reached; callers pause and retry, they never skip input."""


@runtime_checkable
class VectorStore(Protocol):
    def ensure_collection(self, spec: CollectionSpec) -> None:
        """Create the collection and its payload indexes if missing (idempotent)."""

    def upsert(self, collection: str, points: Sequence[Point]) -> None: ...

    def retrieve(self, collection: str, ids: Sequence[str]) -> list[Hit]:
        """Points by id (score 0.0) with payload; unknown ids are left out."""

    def search_many(self, collection: str, queries: Sequence[SearchQuery]) -> list[list[Hit]]:
        """For each query, the top ``limit`` points by cosine among those matching its filter,
        best first; the queries are planned as one batch."""

    def set_payload(self, collection: str, ids: Sequence[str], values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the payload of each point."""

    def count(self, collection: str, flt: Filter | None = None) -> int: ...

    def scroll(
        self, collection: str, flt: Filter | None, limit: int, offset: str | None = None
    ) -> tuple[list[Hit], str | None]:
        """A page of points (payload only) and the offset of the next page, None at the end."""

    def delete(self, collection: str, flt: Filter) -> None: ...

    def close(self) -> None: ...

"""Vector store: the protocol, its plain-data types, and the per-partition shards (``open_shards``
chooses the adapter from settings)."""

from __future__ import annotations

from memstream.adapters.store.shards import Shards, all_stores, open_shards
from memstream.core.store import (
    CollectionSpec,
    Filter,
    Hit,
    Point,
    Range,
    SearchQuery,
    StoreUnavailable,
    VectorStore,
    scroll_all,
    search,
)

__all__ = [
    "CollectionSpec",
    "Filter",
    "Hit",
    "Point",
    "Range",
    "SearchQuery",
    "Shards",
    "StoreUnavailable",
    "VectorStore",
    "all_stores",
    "open_shards",
    "scroll_all",
    "search",
]

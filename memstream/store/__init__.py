"""Vector store: the protocol, its plain-data types, and ``open_store`` choosing the adapter from settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstream.store.base import (
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

if TYPE_CHECKING:
    from memstream.settings import Settings

__all__ = [
    "CollectionSpec",
    "Filter",
    "Hit",
    "Point",
    "Range",
    "SearchQuery",
    "StoreUnavailable",
    "VectorStore",
    "open_store",
    "scroll_all",
    "search",
]


def open_store(settings: Settings) -> VectorStore:
    # Adapters are imported here so a process pays only for the client library it uses.
    if settings.store == "edge":
        from memstream.store.edge import EdgeStore

        return EdgeStore(settings.data_dir / "store")
    if not settings.qdrant_url:
        raise ValueError("MEMSTREAM_STORE=qdrant needs MEMSTREAM_QDRANT_URL")
    from memstream.store.qdrant_server import QdrantServerStore

    api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
    return QdrantServerStore.from_url(settings.qdrant_url, api_key)

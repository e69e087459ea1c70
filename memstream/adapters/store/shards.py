"""The store each partition of the turns topic writes to.

Every record about a user travels on the same partition (the key is ``tenant/user``), and a
worker owns its partitions exclusively, so a partition's units never need another's. That is
what lets several worker processes share the embedded store: Qdrant Edge allows one process
per shard directory, so each partition gets its own shard, opened when the partition is first
processed and closed when the partition is revoked (the next owner then opens it). A Qdrant
server is shared by every worker already, so there all partitions use one store.

Consequence: with Edge, the partition count of the topics must not change after data exists
(a user would move to a shard that does not hold their units).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from memstream.core.store import CollectionSpec, VectorStore

if TYPE_CHECKING:
    from memstream.adapters.settings import StorageSettings


class Shards(Protocol):
    def get(self, partition: int) -> VectorStore:
        """The store of ``partition``, opened (and its collections ensured) on first use."""

    def release(self, partitions: Iterable[int]) -> None:
        """Close the stores of partitions this process no longer owns (no-op when shared)."""

    def opened(self) -> list[VectorStore]:
        """The distinct stores open now."""

    def close(self) -> None: ...


def all_stores(shards: Shards, partitions: int) -> list[VectorStore]:
    """Every partition's store, distinct: for readers that look at everything (status, tools)."""
    for p in range(partitions):
        shards.get(p)
    return shards.opened()


class SharedStore:
    """One store (a Qdrant server collection) for every partition."""

    def __init__(self, store: VectorStore, specs: Sequence[CollectionSpec]) -> None:
        self._store = store
        for spec in specs:
            store.ensure_collection(spec)

    def get(self, partition: int) -> VectorStore:
        return self._store

    def release(self, partitions: Iterable[int]) -> None:
        return None

    def opened(self) -> list[VectorStore]:
        return [self._store]

    def close(self) -> None:
        self._store.close()


class EdgeShards:
    """One Qdrant Edge shard directory per partition: ``root/partition-<n>/<collection>``."""

    def __init__(
        self,
        root: Path,
        specs: Sequence[CollectionSpec],
        open_timeout_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._root = root
        self._specs = tuple(specs)
        self._open_timeout_s = open_timeout_s
        self._sleep = sleep
        self._stores: dict[int, VectorStore] = {}
        self._lock = threading.Lock()

    def get(self, partition: int) -> VectorStore:
        store = self._stores.get(partition)
        if store is None:
            with self._lock:
                store = self._stores.get(partition) or self._open(partition)
                self._stores[partition] = store
        return store

    def _open(self, partition: int) -> VectorStore:
        from memstream.adapters.store.edge import EdgeStore

        # During a rebalance the previous owner may still be closing this shard; Edge then
        # refuses the open ("WouldBlock" on its WAL lock). Wait for it rather than fail.
        deadline = time.monotonic() + self._open_timeout_s
        while True:
            store = EdgeStore(self._root / f"partition-{partition}")
            try:
                for spec in self._specs:
                    store.ensure_collection(spec)
                return store
            except Exception as exc:
                store.close()
                if "WouldBlock" not in str(exc) or time.monotonic() > deadline:
                    raise
                self._sleep(0.2)

    def release(self, partitions: Iterable[int]) -> None:
        with self._lock:
            for p in partitions:
                store = self._stores.pop(p, None)
                if store is not None:
                    store.close()

    def opened(self) -> list[VectorStore]:
        return list(self._stores.values())

    def close(self) -> None:
        self.release(list(self._stores))


def open_shards(settings: StorageSettings, specs: Sequence[CollectionSpec]) -> Shards:
    """The configured store, per partition, with ``specs`` ensured in each."""
    if settings.store == "edge":
        return EdgeShards(settings.data_dir / "store", specs)
    if not settings.qdrant_url:
        raise ValueError("MEMSTREAM_STORE=qdrant needs MEMSTREAM_QDRANT_URL")
    # Imported here so a process pays only for the client library it uses.
    from memstream.adapters.store.qdrant_server import QdrantServerStore

    api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
    return SharedStore(QdrantServerStore.from_url(settings.qdrant_url, api_key), specs)

"""Per-partition stores: Edge gets one shard directory per partition, a Qdrant server is shared."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import numpy as np
import pytest
from pydantic import SecretStr

from memstream.adapters.settings import Settings, StorageSettings
from memstream.adapters.store import CollectionSpec, Point, all_stores, open_shards
from memstream.adapters.store import qdrant_server as qdrant_server_module
from memstream.adapters.store.edge import EdgeStore
from memstream.adapters.store.qdrant_server import QdrantServerStore
from memstream.adapters.store.shards import EdgeShards, SharedStore

SPEC = CollectionSpec(name="units", dim=4, keyword_fields=("user",))


def point(n: int) -> Point:
    return Point(str(uuid.UUID(int=n + 1)), np.ones(4, dtype=np.float32), {"user": f"u{n}"})


def test_edge_partitions_are_separate_shard_directories(tmp_path: Path) -> None:
    shards = open_shards(StorageSettings(data_dir=tmp_path), [SPEC])
    assert isinstance(shards, EdgeShards)
    shards.get(0).upsert("units", [point(0), point(1)])
    shards.get(3).upsert("units", [point(2)])
    assert shards.get(0) is shards.get(0)
    assert [s.count("units") for s in (shards.get(0), shards.get(3))] == [2, 1]
    assert all(isinstance(s, EdgeStore) for s in shards.opened())
    shards.close()
    assert (tmp_path / "store" / "partition-0" / "units").is_dir()
    assert (tmp_path / "store" / "partition-3" / "units").is_dir()
    assert shards.opened() == []


def test_all_stores_opens_every_partition(tmp_path: Path) -> None:
    shards = open_shards(StorageSettings(data_dir=tmp_path), [SPEC])
    shards.get(1).upsert("units", [point(0)])
    stores = all_stores(shards, 4)
    assert len(stores) == 4
    assert sum(s.count("units") for s in stores) == 1
    shards.close()


def test_released_partition_can_be_opened_by_the_next_owner(tmp_path: Path) -> None:
    old = EdgeShards(tmp_path, [SPEC])
    old.get(0).upsert("units", [point(0)])
    # Edge allows one opener per shard directory: the next owner waits until the old one lets go.
    with pytest.raises(Exception, match="WouldBlock"):
        EdgeShards(tmp_path, [SPEC], open_timeout_s=0.3).get(0)
    threading.Timer(0.5, old.release, args=([0],)).start()
    new = EdgeShards(tmp_path, [SPEC], open_timeout_s=30)
    assert new.get(0).count("units") == 1
    assert old.opened() == []
    new.close()


def test_release_of_unopened_partitions_is_harmless(tmp_path: Path) -> None:
    shards = EdgeShards(tmp_path, [SPEC])
    shards.release([0, 7])
    assert shards.opened() == []


def test_qdrant_server_is_one_store_for_every_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client_kwargs: dict[str, object] = {}

    def fake_client(**kwargs: object) -> object:
        client_kwargs.update(kwargs)
        return object()

    monkeypatch.setattr(qdrant_server_module, "QdrantClient", fake_client)
    url, key = "https://q.example:6333", SecretStr("secret")
    settings = Settings(
        storage=StorageSettings(data_dir=tmp_path, store="qdrant", qdrant_url=url, qdrant_api_key=key)
    )
    shards = open_shards(settings.storage, [])  # no specs: the fake client cannot create collections
    assert isinstance(shards, SharedStore)
    assert isinstance(shards.get(0), QdrantServerStore)
    assert shards.get(0) is shards.get(3)
    assert all_stores(shards, 4) == [shards.get(0)]
    shards.release([0])
    assert shards.opened() == [shards.get(3)]
    assert client_kwargs["url"] == url
    assert client_kwargs["api_key"] == "secret"


def test_qdrant_server_needs_a_url(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="QDRANT_URL"):
        open_shards(StorageSettings(data_dir=tmp_path, store="qdrant"), [SPEC])

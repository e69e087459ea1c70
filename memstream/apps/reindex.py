"""``memstream reindex``: rebuild the ``memories`` collection from the ``memory.updates`` topic.

The collection is a materialised view of the topic, so reading the topic from the start and
applying it with the indexer gives it back. Run it with the pipeline stopped (the embedded
store allows one process per shard). Needs the topic's retention to cover its whole history.
"""

from __future__ import annotations

from dataclasses import dataclass

from memstream.adapters.embedders import make_embedder
from memstream.adapters.kafka import partition_for, read_topic
from memstream.adapters.settings import Settings
from memstream.adapters.store import Filter, all_stores, open_shards
from memstream.consumers.indexer import Indexer
from memstream.core.memories import MEMORIES, memories_spec
from memstream.core.unit_views import views_spec
from memstream.core.units import units_spec
from memstream.schemas.memory import MemoryUpdate
from memstream.schemas.topics import MEMORY_UPDATES


@dataclass(frozen=True)
class Reindexed:
    updates: int
    memories: int


async def reindex(settings: Settings) -> Reindexed:
    embedder = make_embedder(settings.embedding)
    shards = open_shards(
        settings.storage, [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)]
    )
    try:
        records = await read_topic(settings, settings.kafka.topic(MEMORY_UPDATES.name))
        for store in all_stores(shards, settings.kafka.topic_partitions):
            store.delete(MEMORIES, Filter())
        by_partition: dict[int, list[MemoryUpdate]] = {}
        for key, value in records:  # in topic order within each partition
            update = MemoryUpdate.from_bytes(value)
            by_partition.setdefault(partition_for(key or b"", settings.kafka.topic_partitions), []).append(
                update
            )
        indexer = Indexer(embedder)
        for partition, updates in sorted(by_partition.items()):
            await indexer.apply(shards.get(partition), updates)
        total = sum(s.count(MEMORIES) for s in all_stores(shards, settings.kafka.topic_partitions))
        return Reindexed(len(records), total)
    finally:
        shards.close()

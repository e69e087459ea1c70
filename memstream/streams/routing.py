"""Where a turn is processed: on its key's partition (``memstream.adapters.kafka.partition_for``), whatever
partitioner its producer used. librdkafka's default (CRC32), Sarama's (FNV-1a) and other clients
place keyed records elsewhere; such a turn is forwarded to its key's partition, as Kafka Streams
repartitions, so that a user's units, windows, consolidation and store shard all stay together."""

from __future__ import annotations

from memstream.adapters.kafka import partition_for


def misplaced(key: bytes | None, partition: int, partitions: int) -> int | None:
    """The partition a record with ``key`` belongs on when it arrived on another ``partition``;
    None when it is home. A keyless record is never forwarded: ingest dead-letters it where it
    arrived (``memstream.core.validation.check_key``)."""
    if key is None:
        return None
    home = partition_for(key, partitions)
    return None if home == partition else home

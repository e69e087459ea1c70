"""faust's Kafka consumer, with one fix: records are never skipped after a rebalance.

While its flow is paused (a rebalance, table recovery) faust may still fetch records, drop them,
and then "seek back to committed offsets" (``Consumer.perform_seek``). aiokafka's
``seek_to_committed`` only seeks partitions whose committed offset is above 0, so a partition
with no commit yet keeps the advanced fetch position and the dropped records are never read:
found by ``tests/test_faults.py`` (a worker killed before its first commit of a partition, then
restarted: the records it had not committed were skipped). Here such partitions go back to their
beginning; processing is idempotent, so reading them again costs time, never correctness.
"""

from __future__ import annotations

from collections.abc import Mapping

from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.types import TP


class RewindingConsumer(AIOKafkaConsumer):
    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed = await super().seek_to_committed()
        uncommitted = [tp for tp, offset in committed.items() if not offset]
        if uncommitted:
            await self._thread.seek_to_beginning(*uncommitted)
        return committed

"""faust's Kafka consumer, with two changes.

Records are never skipped after a rebalance. While its flow is paused (a rebalance, table
recovery) faust may still fetch records, drop them, and then "seek back to committed offsets"
(``Consumer.perform_seek``). aiokafka's ``seek_to_committed`` only seeks partitions whose committed
offset is above 0, so a partition with no commit yet keeps the advanced fetch position and the
dropped records are never read: found by ``tests/test_faults.py`` (a worker killed before its
first commit of a partition, then restarted: the records it had not committed were skipped).
Here such partitions go back to their beginning; processing is idempotent, so reading them again
costs time, never correctness.

Against Tansu (``TansuConsumer``), fetches wait less. faust asks the broker to hold a fetch up to
1.5 s for data; Kafka answers as soon as a record arrives, Tansu only when the wait is up
(measured: 0.45 s from produce to consume with faust's wait, 1-7 ms with 100 ms). Every hop
between agents (consolidation -> memory.updates -> index) would pay it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiokafka
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.types import TP

TANSU_FETCH_MAX_WAIT_MS = 100


class RewindingConsumer(AIOKafkaConsumer):
    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed = await super().seek_to_committed()
        uncommitted = [tp for tp, offset in committed.items() if not offset]
        if uncommitted:
            await self._thread.seek_to_beginning(*uncommitted)
        return committed


class _ShortFetchThread(AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # faust passes a fixed 1,500 ms; aiokafka reads this when start() builds its fetcher.
        consumer._fetch_max_wait_ms = TANSU_FETCH_MAX_WAIT_MS
        return consumer


class TansuConsumer(RewindingConsumer):
    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return _ShortFetchThread(self, loop=self.loop, beacon=self.beacon)

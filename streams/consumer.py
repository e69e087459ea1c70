"""faust's Kafka consumer, with four changes. The first three keep a record that no agent
processed from being committed; each was found by ``tests/test_faults.py`` (a worker killed
mid-replay, then restarted).

Only records processed while the flow runs are committed. faust's stream *acks* a record it
skips because the flow is stopped (a rebalance, a shutdown) or because it was fetched in an
earlier generation, so that lag does not grow; the next commit then covered it (a worker
stopping while a turn waited in its stream: the turn was never stored). Here such an ack
releases the record (a rebalance or a stop waits for in-flight records, and must not wait for
these) without making its offset committable; a batch that finishes while the flow is stopped
is not committed either, so its records' next owner processes them again, which is idempotent.

A commit never passes over an offset no agent acked. When recovery completes, faust resumes the
partitions before it seeks them to their committed offsets; records fetched in between reach the
streams, the seek rewinds the read offset under the records still being delivered, and some are
dropped on the way (seen: a consolidation request never consolidated; with the seek delayed by
0.5 s, 189 windows in a row). faust then
commits over them: as a "gap" (meant for transaction markers and compacted offsets, which our
topics do not have), or because it compares the first acked offset with committed + 1. Here the
commit waits at the missing offset, and the partition is read again from it (once per missing
offset, again after ``REREAD_RETRY_S``; counted in ``memstream_consumer_rereads_total``).

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

import logging
import time
from collections.abc import Mapping
from typing import Any

import aiokafka
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.types import TP, Message
from faust.types.tuples import ack_lock
from mode.utils.futures import notify

from memstream import metrics

log = logging.getLogger(__name__)

TANSU_FETCH_MAX_WAIT_MS = 100
REREAD_RETRY_S = 120.0


class RewindingConsumer(AIOKafkaConsumer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._beginning: dict[TP, int] = {}  # where a partition never committed was read from
        self._reread: dict[TP, tuple[int, float]] = {}  # the last offset read again, and when

    def ack(self, message: Message) -> bool:
        app = self.app
        if app.flow_control.is_active() and message.generation_id == app.consumer_generation_id:
            return super().ack(message)
        with ack_lock:
            message.acked = True
            self._unacked_messages.discard(message)
            notify(self._waiting_for_ack)
        return False

    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        """Not recorded: our topics have no transaction markers and are not compacted, so an
        offset missing from what reached the streams is a record dropped on the way (see
        ``_new_offset``), never a gap to commit over."""

    def _new_offset(self, tp: TP) -> int | None:
        acked = self._acked[tp]
        start = self._committed_offset[tp]
        if start is None:
            start = self._beginning.get(tp)
        if acked and start is not None and min(acked) > start:
            # faust lets a commit pass over one missing offset (it compares with committed + 1).
            self._read_again(tp, start)
            return None
        return super()._new_offset(tp)

    def _read_again(self, tp: TP, offset: int) -> None:
        # Once per missing offset: the records read again queue up behind those already fetched,
        # so filling the hole can take a while; a second read meanwhile would only repeat them.
        # Asked again after REREAD_RETRY_S, in case the record was dropped once more.
        last = self._reread.get(tp)
        if last is not None and last[0] == offset and time.monotonic() - last[1] < REREAD_RETRY_S:
            return
        self._reread[tp] = (offset, time.monotonic())
        metrics.CONSUMER_REREADS.labels(tp.topic).inc()
        log.warning(
            "%s/%d: offset %d reached no agent; reading the partition again from it",
            tp.topic,
            tp.partition,
            offset,
        )
        self.add_future(self._seek_back(tp, offset))  # the service cancels it when it stops

    async def _seek_back(self, tp: TP, offset: int) -> None:
        earliest = (await self.earliest_offsets(tp)).get(tp, 0)
        if earliest > offset:  # expired by retention before it was processed: gone for good
            log.error(
                "%s/%d: offsets %d-%d expired unprocessed", tp.topic, tp.partition, offset, earliest - 1
            )
            self._committed_offset[tp] = earliest
            return
        await self.seek(tp, offset)

    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed = await super().seek_to_committed()
        uncommitted = [tp for tp, offset in committed.items() if not offset]
        if uncommitted:
            await self._thread.seek_to_beginning(*uncommitted)
            self._beginning.update(await self.earliest_offsets(*uncommitted))
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

"""faust's Kafka consumer, changed so that every record reaches an agent, in order, before its
offset is committed. Each change was found by ``tests/test_faults.py`` (a worker killed
mid-replay, then restarted; CI runs and stressed local runs).

Records reach the agents in offset order, none skipped (``streams/delivery.py``): faust's own
read-offset check drops records fetched again after a seek when a record fetched before it
was handed over in between, and then commits over them.

Only records processed while the flow runs are committed. faust's stream *acks* a record it
skips because the flow is stopped (a rebalance, a shutdown) or because it was fetched in an
earlier generation, so that lag does not grow; the next commit then covered it (a worker
stopping while a turn waited in its stream: the turn was never stored). Here such an ack
releases the record (a rebalance or a stop waits for in-flight records, and must not wait for
these) without making its offset committable; its partition is sought back to the committed
offset on the next assignment, so it is read again. A commit never passes an offset missing
from the acks: faust compares the first acked offset with committed + 1.

Records are never skipped after a rebalance. While its flow is paused (a rebalance, table
recovery) faust may still fetch records, drop them, and then "seek back to committed offsets"
(``Consumer.perform_seek``). aiokafka's ``seek_to_committed`` only seeks partitions whose committed
offset is above 0, so a partition with no commit yet keeps the advanced fetch position and the
dropped records are never read: found by ``tests/test_faults.py`` (a worker killed before its
first commit of a partition, then restarted: the records it had not committed were skipped).
Here such partitions are sought to their earliest offset; processing is idempotent, so reading
them again costs time, never correctness.

Against Tansu (``TansuConsumer``), fetches wait less. faust asks the broker to hold a fetch up to
1.5 s for data; Kafka answers as soon as a record arrives, Tansu only when the wait is up
(measured: 0.45 s from produce to consume with faust's wait, 1-7 ms with 100 ms). Every hop
between agents (consolidation -> memory.updates -> index) would pay it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiokafka
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.types import TP, Message
from faust.types.tuples import ack_lock
from mode.utils.futures import notify

from memstream.adapters import metrics
from memstream.streams.delivery import InOrder, Verdict

log = logging.getLogger(__name__)

TANSU_FETCH_MAX_WAIT_MS = 100


class _Emptied:
    """Registered with faust's flow control beside the agents' queues, to be told when it
    empties them (``clear``)."""

    def __init__(self, consumer: RewindingConsumer) -> None:
        self._consumer = consumer

    def clear(self) -> None:
        self._consumer.queues_emptied()


class RewindingConsumer(AIOKafkaConsumer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._order: InOrder[TP] = InOrder()
        self._emptied = _Emptied(self)  # held here: faust keeps its queues in a WeakSet
        self.app.flow_control.manage_queue(self._emptied)  # type: ignore[arg-type]

    def queues_emptied(self) -> None:
        if not self.app.flow_control.is_active():
            return  # emptied for a revocation: the next assignment seeks every partition anyway
        again = self._order.emptied()
        if again:
            self.add_future(self._read_again(again))

    async def _read_again(self, again: Mapping[TP, int]) -> None:
        for tp, offset in again.items():
            try:
                await self.seek(tp, offset)
            except Exception as exc:  # revoked meanwhile: its next assignment seeks it
                log.debug("%s/%d not read again: %r", tp.topic, tp.partition, exc)

    def _ordered(self, tp: TP) -> bool:
        # Changelog and standby partitions are read by table recovery with its own seeks.
        return bool(self.app.topics.acks_enabled_for(tp.topic))

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        rewound: set[TP] = set()
        async for tp, message in super().getmany(timeout):
            if not self._ordered(tp):
                yield tp, message
                continue
            verdict = self._order.admit(tp, message.offset, flowing=self.app.flow_control.is_active())
            if verdict is Verdict.REWIND and tp not in rewound:  # once per fetch: the rest is stale too
                rewound.add(tp)
                await self._rewind(tp)
            if verdict is Verdict.DELIVER:
                # faust's drain loop drops a record below its read offset and counts a jump as a
                # gap; the order is kept here, so its check must let every delivered record pass.
                self._read_offset[tp] = message.offset
                yield tp, message

    async def _rewind(self, tp: TP) -> None:
        metrics.CONSUMER_REWINDS.labels(tp.topic).inc()
        earliest = (await self.earliest_offsets(tp)).get(tp, 0)
        target = self._order.rewind_to(tp, earliest)
        if target is None:
            # Sought, emptied or revoked while the broker answered (seen once: the streams resumed
            # right after table recovery, a RocksDB restart that read nothing): seeking it is
            # someone else's now; rewinding it here would be a second, stale seek.
            return
        offset, expired = target
        if expired:
            log.error(
                "%s/%d: offsets %d-%d expired before they were processed; going on at %d",
                tp.topic,
                tp.partition,
                expired.start,
                expired.stop - 1,
                offset,
            )
            await self._add_gap(tp, expired.start, expired.stop - 1)  # so commits can pass them
        await self.seek(tp, offset)

    async def seek(self, partition: TP, offset: int) -> None:
        self._order.seeking(partition)
        await super().seek(partition, offset)
        self._order.sought(partition, offset)

    async def _seek(self, partition: TP, offset: int) -> None:
        # faust's driver calls aiokafka's seek from this thread, and aiokafka's seek deletes the
        # partition's fetched batch while the consumer thread may be draining it: fetched_records
        # then raises KeyError and the worker crashes (seen once in CI, two workers rebalancing).
        # Seeking in the consumer thread, like every other call to the client, orders the two.
        thread = self._thread

        async def in_consumer_thread() -> None:
            thread.seek(partition, offset)

        await thread.call_thread(in_consumer_thread)

    async def seek_to_committed(self) -> Mapping[TP, int]:
        ordered = [tp for tp in self.assignment() if self._ordered(tp)]
        for tp in ordered:
            self._order.seeking(tp)
        committed = await super().seek_to_committed()
        # Explicit seeks: aiokafka's seek_to_beginning is lazy and keeps records it had fetched.
        uncommitted = [tp for tp, offset in committed.items() if not offset]
        beginning = await self.earliest_offsets(*uncommitted) if uncommitted else {}
        for tp in uncommitted:
            await self._seek(tp, beginning.get(tp, 0))
        for tp in ordered:
            self._order.sought(tp, committed.get(tp) or beginning.get(tp, 0))
        return committed

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        for tp in revoked:
            self._order.forget(tp)
        await super().on_partitions_revoked(revoked)

    def ack(self, message: Message) -> bool:
        app = self.app
        if app.flow_control.is_active() and message.generation_id == app.consumer_generation_id:
            self._order.done(message.tp, message.offset)
            return super().ack(message)
        with ack_lock:  # released, not committable: see the module docstring
            message.acked = True
            self._unacked_messages.discard(message)
            notify(self._waiting_for_ack)
        return False

    def _new_offset(self, tp: TP) -> int | None:
        acked = self._acked[tp]
        committed = self._committed_offset[tp]
        if acked and committed and min(acked) > committed and not self._gap[tp].overlaps(committed):
            return None  # the record at the committed offset has not been processed yet
        return super()._new_offset(tp)


class _ShortFetchThread(AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # faust passes a fixed 1,500 ms; aiokafka reads this when start() builds its fetcher.
        consumer._fetch_max_wait_ms = TANSU_FETCH_MAX_WAIT_MS
        return consumer


class TansuConsumer(RewindingConsumer):
    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return _ShortFetchThread(self, loop=self.loop, beacon=self.beacon)

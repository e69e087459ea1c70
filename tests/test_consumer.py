"""streams/consumer.py: only records processed while the flow runs become committable.

faust's stream acks a record it skips while the flow is stopped (a rebalance, a shutdown) or
that was fetched in an earlier generation; faust's own consumer then commits past it, and the
record is lost (a turn never stored, found by tests/test_faults.py). ``Consumer._new_offset`` is
the offset faust's next commit of a partition writes (None: nothing to commit)."""

from __future__ import annotations

import asyncio
import time
from typing import TypeVar

import faust
import pytest
from faust.transport.drivers.aiokafka import Consumer as FaustConsumer
from faust.types import TP
from faust.types.tuples import Message

from streams.consumer import RewindingConsumer, TansuConsumer

TOPIC = "turns"
TP0 = TP(TOPIC, 0)


C = TypeVar("C", bound=FaustConsumer)


def consumer(cls: type[C]) -> tuple[faust.App, C]:
    app = faust.App("test-consumer", broker="kafka://127.0.0.1:1")  # never connects
    c = cls(
        app.transport,
        callback=lambda message: None,
        on_partitions_revoked=lambda revoked: None,
        on_partitions_assigned=lambda assigned: None,
    )
    app.topics.acking_topics.add(TOPIC)  # what subscribing an agent to the topic does
    app.flow_control.resume()
    return app, c


def delivered(c: FaustConsumer, offset: int, generation: int = 0) -> Message:
    message = Message(TOPIC, 0, offset, 0.0, 0, [], b"k", b"v", None, tp=TP0, generation_id=generation)
    c.track_message(message)
    return message


@pytest.mark.parametrize("cls", [RewindingConsumer, TansuConsumer])
def test_a_record_acked_while_the_flow_is_stopped_is_released_but_not_committed(
    cls: type[FaustConsumer],
) -> None:
    app, c = consumer(cls)
    assert c.ack(delivered(c, 0))
    assert c._new_offset(TP0) == 1

    app.flow_control.suspend()  # what a rebalance and a shutdown do first
    skipped = delivered(c, 1)
    assert not c.ack(skipped)
    assert skipped.acked and skipped not in c._unacked_messages  # nothing waits for it
    assert c._new_offset(TP0) is None  # the commit stays at 1: the record is read again

    app.flow_control.resume()
    assert c.ack(delivered(c, 1))  # processed this time
    assert c._new_offset(TP0) == 2


def test_a_record_from_an_earlier_generation_is_not_committed() -> None:
    app, c = consumer(TansuConsumer)
    app.consumer_generation_id = 3
    stale = delivered(c, 0, generation=2)  # fetched before the rebalance
    assert not c.ack(stale)
    assert stale.acked and c._new_offset(TP0) is None
    assert c.ack(delivered(c, 0, generation=3))
    assert c._new_offset(TP0) == 1


def test_faust_alone_commits_the_record_it_skipped_and_one_it_never_saw() -> None:
    """The behaviour the subclass exists for: without it, the skipped record's offset is
    committed, and so is a missing one."""
    app, c = consumer(FaustConsumer)
    app.flow_control.suspend()
    assert c.ack(delivered(c, 0))
    assert c._new_offset(TP0) == 1
    app.flow_control.resume()
    c._committed_offset[TP0] = 1
    c.ack(delivered(c, 2))  # 1 never reached a stream
    assert c._new_offset(TP0) == 3


def test_a_record_that_reached_no_stream_holds_the_commit_and_is_read_again() -> None:
    """During recovery faust resumes the partitions before seeking them to their committed
    offsets; records fetched in between can be dropped on the way to the streams, and faust
    commits over a missing offset (as a "gap", or comparing with committed + 1). Found by
    tests/test_faults.py: a consolidation request that no agent ever saw was committed."""

    async def scenario() -> tuple[list[int | None], list[tuple[TP, int]]]:
        _, c = consumer(TansuConsumer)
        seeks: list[tuple[TP, int]] = []

        async def earliest(*tps: TP) -> dict[TP, int]:
            return dict.fromkeys(tps, 0)

        async def seek(tp: TP, offset: int) -> None:
            seeks.append((tp, offset))

        c.earliest_offsets = earliest  # type: ignore[method-assign]
        c.seek = seek  # type: ignore[method-assign,assignment]
        c._committed_offset[TP0] = 3
        await c._add_gap(TP0, 4, 5)  # what faust's fetch loop calls on seeing 5 after 3
        commits = []
        for offset in (3, 5, 6):
            c.ack(delivered(c, offset))
        commits.append(c._new_offset(TP0))  # 3 is done
        c._committed_offset[TP0] = 4
        commits.append(c._new_offset(TP0))  # 4 missing: nothing to commit; read again from 4
        commits.append(c._new_offset(TP0))  # asked again: one re-read per missing offset
        await asyncio.sleep(0)  # the re-read runs
        c.ack(delivered(c, 4))
        commits.append(c._new_offset(TP0))
        return commits, seeks

    commits, seeks = asyncio.run(scenario())
    assert commits == [4, None, None, 7]
    assert seeks == [(TP0, 4)]


def test_a_partition_never_committed_must_start_from_its_beginning() -> None:
    _, c = consumer(TansuConsumer)
    c._beginning[TP0] = 0
    c._reread[TP0] = (0, time.monotonic())  # a re-read from 0 was just asked for
    c.ack(delivered(c, 1))
    assert c._new_offset(TP0) is None
    c.ack(delivered(c, 0))
    assert c._new_offset(TP0) == 2

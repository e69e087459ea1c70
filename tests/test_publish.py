"""The one place decisions take effect (streams/publish.py): every record is delivered before the
state a decision moves on and before its memory updates are awaited by the next work, and each
outcome is counted once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from memstream.adapters import metrics
from memstream.core.memories import upsert
from memstream.schemas.events import Deferred
from memstream.schemas.topics import DEFERRED, MEMORY_UPDATES
from memstream.streams.decisions import Deferral, Done, Dropped, Send, made_at
from memstream.streams.publish import Publisher
from memstream.streams.read_your_writes import OwnWrites
from tests.test_own_writes import memory

Headers = list[tuple[str, bytes]]


def deferred() -> Deferred:
    return Deferred(source_topic="windows", key="t/u1", value=b"{}", reason="x", not_before=datetime.now(UTC))


def test_state_moves_on_and_own_writes_are_awaited_only_once_every_record_is_delivered() -> None:
    own = OwnWrites()
    sent: list[tuple[str, bytes]] = []
    saved: list[str] = []
    update = upsert(memory(1))
    later = Deferred(
        source_topic="windows", key="t/u1", value=b"{}", reason="x", not_before=datetime.now(UTC)
    )

    async def run() -> None:
        delivered = asyncio.get_running_loop().create_future()

        async def send(topic: str, key: bytes, value: bytes, headers: Headers) -> asyncio.Future[None]:
            sent.append((topic, key))
            return delivered

        publish = Publisher(send, own)
        task = asyncio.ensure_future(
            publish(
                Done(
                    sends=[Send("turns", b"t/u1", b"x")],
                    updates=[update],
                    after=lambda: saved.append("state"),
                ),
                Deferral(later, trigger="day"),
            )
        )
        for _ in range(5):
            await asyncio.sleep(0)
        assert sent == [("turns", b"t/u1"), (MEMORY_UPDATES.name, b"t/u1"), (DEFERRED.name, b"t/u1")]
        assert not task.done() and saved == [] and own.waiting("t/u1") == 0  # not delivered yet
        delivered.set_result(None)
        await task

    asyncio.run(run())
    assert saved == ["state"] and own.waiting("t/u1") == 1


def test_each_outcome_is_counted_once_and_nothing_dropped_counts_nothing() -> None:
    def count(trigger: str, outcome: str) -> float:
        return metrics.CONSOLIDATIONS.labels(trigger, outcome)._value.get()

    def forgotten(stage: str) -> float:
        return metrics.FORGOTTEN_RECORDS.labels(stage)._value.get()

    async def send(topic: str, key: bytes, value: bytes, headers: Headers) -> asyncio.Future[None]:
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    later = Deferred(
        source_topic="windows", key="t/u1", value=b"{}", reason="x", not_before=datetime.now(UTC)
    )
    before = (count("week", "deferred"), count("week", "nothing"), forgotten("index"), forgotten("ingest"))
    publish = Publisher(send, OwnWrites())
    asyncio.run(
        publish(Deferral(later, "week"), Done(trigger="week"), Dropped("index", 3), Dropped("ingest", 0))
    )
    after = (count("week", "deferred"), count("week", "nothing"), forgotten("index"), forgotten("ingest"))
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 3, 0]


def test_deferred_work_carries_when_it_was_first_made_and_a_reader_gets_that_time_back() -> None:
    """A deleted user's work is told by when it was made (streams/handlers.py): a deferral or a
    re-queued record, published anew, keeps that time in a header; other records have none."""
    headers: list[Headers] = []

    async def send(topic: str, key: bytes, value: bytes, sent_headers: Headers) -> asyncio.Future[None]:
        headers.append(sent_headers)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    publish = Publisher(send, OwnWrites())
    asyncio.run(publish(Deferral(deferred(), "day", 1234.5), Done(sends=[Send("windows", b"t/u1", b"{}")])))
    assert headers[1] == []
    assert made_at(headers[0], 2000.0) == 1234.5  # not the record's own create time
    assert made_at(dict(headers[0]), 2000.0) == 1234.5  # headers as faust may hand them over
    assert made_at(headers[1], 2000.0) == 2000.0 and made_at(None, None) is None


def test_the_updates_of_a_user_deleted_while_they_were_sent_are_not_awaited() -> None:
    """The tombstone's erase can run while a publish waits for its acks: the indexer then drops
    those updates (made before the erase), and the user's next work must not wait 30 s for them."""
    own = OwnWrites()
    kept, gone = upsert(memory(1, user="kept")), upsert(memory(2, user="gone"))

    async def run() -> None:
        delivered = asyncio.get_running_loop().create_future()

        async def send(topic: str, key: bytes, value: bytes, headers: Headers) -> asyncio.Future[None]:
            return delivered

        task = asyncio.ensure_future(Publisher(send, own)(Done(updates=[kept, gone])))
        for _ in range(5):
            await asyncio.sleep(0)
        own.forget(gone.key)  # the tombstone, handled meanwhile
        delivered.set_result(None)
        await task

    asyncio.run(run())
    assert own.waiting(kept.key) == 1 and own.waiting(gone.key) == 0

"""streams/key_ordered.py: a stage runs users' records at once, one user's in order, acknowledges in
offset order, and stops reading at its limit. The records here are plain stand-ins for faust events
(partition, offset, key, timestamp); the real topics run in test_llm_pipeline, test_tree and the
fault suite."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import pytest

from memstream.adapters import metrics
from memstream.streams.key_ordered import KeyOrdered


@dataclass
class Message:
    partition: int
    offset: int
    key: bytes
    timestamp: float | None = None
    topic: str = "consolidation"


@dataclass
class Event:
    message: Message


def events(*keys: bytes, partition: int = 0) -> list[Event]:
    return [Event(Message(partition, offset, key)) for offset, key in enumerate(keys)]


class Source:
    """An async stream over ``records`` that counts how many were taken."""

    def __init__(self, records: list[Event]) -> None:
        self.records = records
        self.taken = 0

    async def __aiter__(self) -> AsyncIterator[Any]:
        for r in self.records:
            self.taken += 1
            yield r


async def run(stage: KeyOrdered, source: Source, handle: Any, acked: list[tuple[int, int]]) -> None:
    async def ack(event: Any) -> bool:
        acked.append((event.message.partition, event.message.offset))
        return True

    await stage.run(cast(Any, source), handle, ack)


async def test_users_run_at_once_up_to_the_limit() -> None:
    running, most = 0, 0
    release = asyncio.Event()

    async def handle(event: Any) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1

    source = Source(events(*[f"user-{i}".encode() for i in range(40)]))
    acked: list[tuple[int, int]] = []
    task = asyncio.create_task(run(KeyOrdered("test", 16), source, handle, acked))
    for _ in range(50):
        await asyncio.sleep(0)
    assert most == 16 and source.taken == 16  # no 17th record read while 16 are held
    release.set()
    await task
    assert acked == [(0, o) for o in range(40)]


async def test_one_users_records_run_one_after_the_other_in_order() -> None:
    seen: list[tuple[bytes, int]] = []
    active: set[bytes] = set()

    async def handle(event: Any) -> None:
        key = event.message.key
        assert key not in active, "two records of one user at once"
        active.add(key)
        await asyncio.sleep(0.001 * (7 - event.message.offset % 7))  # later records finish sooner
        seen.append((key, event.message.offset))
        active.discard(key)

    records = events(*[b"a", b"b", b"a", b"c", b"a", b"b"] * 5)
    acked: list[tuple[int, int]] = []
    await run(KeyOrdered("test", 8), Source(records), handle, acked)
    for key in (b"a", b"b", b"c"):
        mine = [offset for k, offset in seen if k == key]
        assert mine == sorted(mine) and len(mine) == sum(r.message.key == key for r in records)
    assert acked == [(0, o) for o in range(len(records))]  # acknowledged in offset order


async def test_a_record_done_early_is_acknowledged_only_after_those_before_it() -> None:
    gate = asyncio.Event()
    acked: list[tuple[int, int]] = []

    async def handle(event: Any) -> None:
        if event.message.offset == 0:
            await gate.wait()  # the first record is slow

    task = asyncio.create_task(run(KeyOrdered("test", 4), Source(events(b"slow", b"x", b"y")), handle, acked))
    for _ in range(20):
        await asyncio.sleep(0)
    assert acked == []  # offsets 1 and 2 are done, but 0 is not: nothing is committable
    gate.set()
    await task
    assert acked == [(0, 0), (0, 1), (0, 2)]


async def test_a_record_whose_handler_raises_is_tried_again_in_place_and_others_go_on() -> None:
    attempts: dict[bytes, int] = {}
    order_done: list[bytes] = []
    slept: list[float] = []

    async def handle(event: Any) -> None:
        key = event.message.key
        attempts[key] = attempts.get(key, 0) + 1
        if key == b"flaky" and attempts[key] <= 3:
            raise ConnectionError("broker unreachable")
        order_done.append(key)

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.sleep(0)

    errors = metrics.CONSOLIDATION_ERRORS.labels("retrying")
    before = errors._value.get()
    acked: list[tuple[int, int]] = []
    stage = KeyOrdered("retrying", 4, sleep=sleep)
    await run(stage, Source(events(b"flaky", b"other", b"flaky", b"third")), handle, acked)
    assert attempts[b"flaky"] == 5 and order_done.index(b"other") < order_done.index(b"flaky")
    assert slept == [1.0, 2.0, 4.0]  # backoff, doubling
    assert errors._value.get() - before == 3
    assert acked == [(0, 0), (0, 1), (0, 2), (0, 3)]  # nothing skipped, in offset order


def test_a_stage_must_hold_a_record() -> None:
    with pytest.raises(ValueError, match="hold one record"):
        KeyOrdered("test", 0)


async def test_a_record_delivered_again_after_a_seek_back_runs_once_and_is_acknowledged_with_it() -> None:
    gate = asyncio.Event()
    ran: list[int] = []
    acked: list[tuple[int, int]] = []

    async def handle(event: Any) -> None:
        ran.append(event.message.offset)
        if event.message.offset == 0:
            await gate.wait()

    # offsets 0 and 1, then both again (a seek back to the committed offset 0), then 2
    records = [*events(b"a", b"b"), *events(b"a", b"b"), Event(Message(0, 2, b"c"))]
    task = asyncio.create_task(run(KeyOrdered("test", 8), Source(records), handle, acked))
    for _ in range(20):
        await asyncio.sleep(0)
    assert acked == []  # offset 0 still runs: neither it nor its copy is acknowledged
    gate.set()
    await task
    assert sorted(ran) == [0, 1, 2]  # each record ran once
    assert acked == [(0, 0), (0, 0), (0, 1), (0, 1), (0, 2)]

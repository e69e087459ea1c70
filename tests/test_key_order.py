"""Key-ordered concurrency (memstream/core/key_order.py): any interleaving of completions never
commits past an unfinished record and never reorders one user's records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.core.key_order import Again, Entry, KeyOrder

PARTITION = {b"a": 0, b"b": 0, b"c": 1, b"d": 2}  # a key lives on one partition, as a user's records do

keys = st.lists(st.sampled_from(sorted(PARTITION)), max_size=40)
# Each step: deliver a partition's next record (0-2); finish the i-th running record (3 + i, modulo
# how many run); or deliver a partition's records again from an earlier offset, as a seek back does.
steps = st.lists(
    st.one_of(st.integers(0, 2), st.integers(3, 60), st.tuples(st.integers(0, 2), st.integers(1, 40))),
    max_size=200,
)


@settings(max_examples=400, deadline=None)
@given(keys, steps)
def test_any_interleaving_keeps_each_users_order_and_never_commits_past_an_unfinished_record(
    records: list[bytes], schedule: list[int | tuple[int, int]]
) -> None:
    log: dict[int, list[bytes]] = {p: [] for p in range(3)}  # each partition's records, by offset
    for key in records:
        log[PARTITION[key]].append(key)
    position = {p: 0 for p in range(3)}  # the next offset each partition delivers
    order: KeyOrder[None] = KeyOrder()
    running: list[Entry[None]] = []
    done: set[tuple[int, int]] = set()  # records that ran to the end at least once
    committed = {p: 0 for p in range(3)}  # what faust would commit: after the highest acknowledged
    outstanding = 0  # records taken (not as a copy) and not yet finished

    def counted() -> None:
        # What `memstream status` shows per stage: in flight, and queued behind their user's record.
        assert order.running() == len(running)
        assert order.waiting() == outstanding - len(running)

    def deliver(partition: int) -> None:
        nonlocal outstanding
        offset = position[partition]
        if offset >= len(log[partition]):
            return
        position[partition] += 1
        taken = order.add(partition, offset, log[partition][offset], None)
        outstanding += not isinstance(taken, Again)
        if taken is Again.RELEASED:
            assert (partition, offset) in done, "acknowledged at once, never done"
            acknowledge(partition, offset)
        elif isinstance(taken, Entry):
            start(taken)

    def start(entry: Entry[None]) -> None:
        assert all(r.key != entry.key for r in running), "two records of one user at once"
        earlier = range(entry.offset)
        assert all((entry.partition, o) in done for o in earlier if log[entry.partition][o] == entry.key), (
            "a user's record started before an earlier one of theirs was done"
        )
        running.append(entry)

    def acknowledge(partition: int, offset: int) -> None:
        committed[partition] = max(committed[partition], offset + 1)
        never_done = [o for o in range(committed[partition]) if (partition, o) not in done]
        assert not never_done, f"committed past unfinished records {never_done}"

    def finish(i: int) -> None:
        nonlocal outstanding
        outstanding -= 1
        entry = running.pop(i % len(running))
        done.add((entry.partition, entry.offset))
        result = order.finish(entry)
        for r in result.released:
            assert r.done
            for _ in (r.item, *r.copies):
                acknowledge(r.partition, r.offset)
        if result.start is not None:
            start(result.start)

    for step in schedule:
        if isinstance(step, tuple):
            partition, back = step
            position[partition] = max(0, position[partition] - back)
        elif step < 3:
            deliver(step)
        elif running:
            finish(step - 3)
        counted()
    while running or any(position[p] < len(log[p]) for p in range(3)):
        if running:
            finish(0)
        else:
            deliver(next(p for p in range(3) if position[p] < len(log[p])))

    assert done == {(p, o) for p in range(3) for o in range(len(log[p]))}  # every record ran
    assert committed == {p: len(log[p]) for p in range(3)}  # and every offset was committed
    assert len(order) == 0 and order.running() == 0 and order.waiting() == 0


def test_a_later_record_of_the_same_key_waits_and_other_keys_do_not() -> None:
    order: KeyOrder[str] = KeyOrder()
    first = order.add(0, 10, b"u1", "u1 first")
    assert first is not None
    assert order.add(0, 11, b"u1", "u1 second") is None  # behind its user's first
    other = order.add(0, 12, b"u2", "u2")
    assert other is not None and order.running() == 2 and order.waiting() == 1
    done = order.finish(other)
    assert done.start is None and done.released == []  # offset 12 waits for 10 and 11
    done = order.finish(first)
    assert done.start is not None and done.start.item == "u1 second"
    assert order.running() == 1 and order.waiting() == 0
    assert [e.offset for e in done.released] == [10]
    done = order.finish(done.start)
    assert [e.offset for e in done.released] == [11, 12]
    assert len(order) == 0


def test_a_record_delivered_again_never_runs_twice_and_finishing_twice_is_refused() -> None:
    order: KeyOrder[str] = KeyOrder()
    entry = order.add(0, 5, b"k", "x")
    assert entry is not None
    assert order.add(0, 5, b"k", "delivered again") is Again.HELD
    done = order.finish(entry)
    assert [(e.offset, e.copies) for e in done.released] == [(5, ["delivered again"])]
    again = order.add(0, 5, b"k", "and again")  # nothing of its partition held: taken anew, runs again
    assert isinstance(again, Entry) and again.item == "and again"
    with pytest.raises(ValueError, match="not running"):
        order.finish(entry)

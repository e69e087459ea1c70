"""Key-ordered concurrency (memstream/core/key_order.py): any interleaving of completions never
commits past an unfinished record and never reorders one user's records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.core.key_order import Entry, KeyOrder

Record = tuple[int, bytes]  # partition, key

records = st.lists(st.tuples(st.integers(0, 2), st.sampled_from([b"a", b"b", b"c", b"d"])), max_size=40)
# Each step: take the next record (None), or finish the i-th running record (modulo how many run).
steps = st.lists(st.one_of(st.none(), st.integers(0, 50)), max_size=200)


@settings(max_examples=300, deadline=None)
@given(records, steps)
def test_any_interleaving_keeps_each_users_order_and_commits_only_done_prefixes(
    delivered: list[Record], schedule: list[int | None]
) -> None:
    order: KeyOrder[int] = KeyOrder()
    next_offset = {p: 0 for p in range(3)}
    added: dict[int, list[int]] = {p: [] for p in range(3)}  # offsets each partition delivered
    arrived: dict[bytes, list[int]] = {}  # per key, the records (by index) in arrival order
    started: dict[bytes, list[int]] = {}
    released: dict[int, list[int]] = {p: [] for p in range(3)}
    running: list[Entry[int]] = []
    unfinished: set[tuple[int, int]] = set()
    pending = list(enumerate(delivered))

    def take() -> None:
        index, (partition, key) = pending.pop(0)
        offset = next_offset[partition]
        next_offset[partition] += 1
        added[partition].append(offset)
        arrived.setdefault(key, []).append(index)
        unfinished.add((partition, offset))
        entry = order.add(partition, offset, key, index)
        if entry is not None:
            start(entry)

    def start(entry: Entry[int]) -> None:
        assert all(r.key != entry.key for r in running), "two records of one key at once"
        started.setdefault(entry.key, []).append(entry.item)
        running.append(entry)

    def finish(i: int) -> None:
        entry = running.pop(i % len(running))
        unfinished.discard((entry.partition, entry.offset))
        result = order.finish(entry)
        for r in result.released:
            assert r.done
            released[r.partition].append(r.offset)
        if result.start is not None:
            start(result.start)

    for step in schedule:
        if step is None and pending:
            take()
        elif running:
            finish(step or 0)
        check(added, released, unfinished)
    while pending or running:
        take() if pending else finish(0)
        check(added, released, unfinished)

    assert started == arrived  # every key's records started, in arrival order
    assert released == added  # everything released, each partition in offset order
    assert len(order) == 0 and order.running() == 0


def check(
    added: dict[int, list[int]], released: dict[int, list[int]], unfinished: set[tuple[int, int]]
) -> None:
    for partition, offsets in released.items():
        assert offsets == added[partition][: len(offsets)]  # a prefix, in order
        committed = offsets[-1] + 1 if offsets else 0  # the offset a commit would write
        assert all(o >= committed for p, o in unfinished if p == partition), "committed past unfinished"


def test_a_later_record_of_the_same_key_waits_and_other_keys_do_not() -> None:
    order: KeyOrder[str] = KeyOrder()
    first = order.add(0, 10, b"u1", "u1 first")
    assert first is not None
    assert order.add(0, 11, b"u1", "u1 second") is None  # behind its user's first
    other = order.add(0, 12, b"u2", "u2")
    assert other is not None and order.running() == 2
    done = order.finish(other)
    assert done.start is None and done.released == []  # offset 12 waits for 10 and 11
    done = order.finish(first)
    assert done.start is not None and done.start.item == "u1 second"
    assert [e.offset for e in done.released] == [10]
    done = order.finish(done.start)
    assert [e.offset for e in done.released] == [11, 12]
    assert len(order) == 0


def test_misuse_is_refused() -> None:
    order: KeyOrder[str] = KeyOrder()
    entry = order.add(0, 5, b"k", "x")
    assert entry is not None
    with pytest.raises(ValueError, match="offset 5 after 5"):
        order.add(0, 5, b"j", "redelivered")
    order.finish(entry)
    with pytest.raises(ValueError, match="not running"):
        order.finish(entry)

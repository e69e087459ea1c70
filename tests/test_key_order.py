"""Key-ordered concurrency (memstream/core/key_order.py): any interleaving of completions never
commits past an unfinished record and never reorders one user's records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.core.key_order import Again, Entry, KeyOrder

Record = tuple[int, bytes]  # partition, key

records = st.lists(st.tuples(st.integers(0, 2), st.sampled_from([b"a", b"b", b"c", b"d"])), max_size=40)
# Each step: take the next record (None); finish the i-th running record (an int, modulo how many
# run); or deliver a partition's records again from an earlier offset, as a seek back does (a pair).
steps = st.lists(
    st.one_of(st.none(), st.integers(0, 50), st.tuples(st.integers(0, 2), st.integers(0, 40))), max_size=200
)


@settings(max_examples=300, deadline=None)
@given(records, steps)
def test_any_interleaving_keeps_each_users_order_and_commits_only_done_prefixes(
    delivered: list[Record], schedule: list[int | tuple[int, int] | None]
) -> None:
    order: KeyOrder[int] = KeyOrder()
    next_offset = {p: 0 for p in range(3)}
    added: dict[int, list[int]] = {p: [] for p in range(3)}  # offsets each partition delivered
    keys: dict[tuple[int, int], bytes] = {}
    arrived: dict[bytes, list[tuple[int, int]]] = {}  # per key, its records in arrival order
    started: dict[bytes, list[tuple[int, int]]] = {}
    released: dict[int, list[int]] = {p: [] for p in range(3)}
    acked_copies: list[tuple[int, int]] = []
    running: list[Entry[int]] = []
    unfinished: set[tuple[int, int]] = set()
    done: set[tuple[int, int]] = set()
    pending = list(delivered)
    again: list[tuple[int, int]] = []  # records delivered again, in front of the new ones

    def take() -> None:
        if again:
            partition, offset = again.pop(0)
            key = keys[(partition, offset)]
        else:
            partition, key = pending.pop(0)
            offset = next_offset[partition]
            next_offset[partition] += 1
            added[partition].append(offset)
            keys[(partition, offset)] = key
            arrived.setdefault(key, []).append((partition, offset))
            unfinished.add((partition, offset))
        taken = order.add(partition, offset, key, offset)
        if taken is Again.RELEASED:
            assert (partition, offset) in done  # acknowledged at once only when done before
            acked_copies.append((partition, offset))
        elif isinstance(taken, Entry):
            start(taken)

    def start(entry: Entry[int]) -> None:
        assert all(r.key != entry.key for r in running), "two records of one key at once"
        started.setdefault(entry.key, []).append((entry.partition, entry.offset))
        running.append(entry)

    def finish(i: int) -> None:
        entry = running.pop(i % len(running))
        unfinished.discard((entry.partition, entry.offset))
        done.add((entry.partition, entry.offset))
        result = order.finish(entry)
        for r in result.released:
            assert r.done
            released[r.partition].append(r.offset)
            acked_copies.extend((r.partition, c) for c in r.copies)
        if result.start is not None:
            start(result.start)

    for step in schedule:
        if isinstance(step, tuple):
            partition, back = step
            again.extend(
                (partition, o) for o in range(max(0, next_offset[partition] - back), next_offset[partition])
            )
        elif step is None and (pending or again):
            take()
        elif running:
            finish(step or 0)
        check(added, released, unfinished)
    while pending or again or running:
        take() if pending or again else finish(0)
        check(added, released, unfinished)

    # every key's records started once each, in arrival order, whatever was delivered again
    assert started == arrived
    assert released == added  # everything released, each partition in offset order
    assert all(c in done for c in acked_copies)  # a copy is acknowledged only once its record is done
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


def test_a_record_delivered_again_never_runs_twice_and_finishing_twice_is_refused() -> None:
    order: KeyOrder[str] = KeyOrder()
    entry = order.add(0, 5, b"k", "x")
    assert entry is not None
    assert order.add(0, 5, b"k", "delivered again") is Again.HELD
    done = order.finish(entry)
    assert [(e.offset, e.copies) for e in done.released] == [(5, ["delivered again"])]
    assert order.add(0, 5, b"k", "and again") is Again.RELEASED
    with pytest.raises(ValueError, match="not running"):
        order.finish(entry)

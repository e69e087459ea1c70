"""The rule deciding which fetched records reach the agents (streams/delivery.py): in offset
order, none skipped, whatever mix of stale and fresh fetches and seeks the consumer goes through."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.streams.delivery import InOrder, Verdict

TP = ("turns", 0)


def sought(order: InOrder, offset: int) -> InOrder:
    order.seeking(TP)
    order.sought(TP, offset)
    return order


def test_nothing_is_delivered_before_the_partition_is_sought_or_while_a_seek_runs() -> None:
    order = InOrder()
    assert order.admit(TP, 0) is Verdict.WAIT
    sought(order, 0)
    assert order.admit(TP, 0) is Verdict.DELIVER
    order.seeking(TP)
    assert order.admit(TP, 1) is Verdict.WAIT
    order.sought(TP, 1)
    assert order.admit(TP, 1) is Verdict.DELIVER


def test_records_fetched_before_a_seek_back_are_dropped_and_the_partition_is_read_again_in_order() -> None:
    order = sought(InOrder(), 10)
    assert [order.admit(TP, o) for o in (10, 11)] == [Verdict.DELIVER] * 2
    sought(order, 5)  # faust seeks back to the committed offset while 12.. are still on their way
    assert order.admit(TP, 12) is Verdict.REWIND
    assert order.rewind_to(TP, earliest=0) == (5, range(0))
    assert [order.admit(TP, o) for o in range(5, 13)] == [Verdict.DELIVER] * 8
    assert order.admit(TP, 12) is Verdict.DUPLICATE


def test_a_rewind_past_expired_records_goes_on_at_the_earliest_offset_and_names_what_expired() -> None:
    order = sought(InOrder(), 3)
    assert order.admit(TP, 9) is Verdict.REWIND
    assert order.rewind_to(TP, earliest=7) == (7, range(3, 7))


def test_a_revoked_partition_waits_for_its_next_seek() -> None:
    order = sought(InOrder(), 0)
    order.forget(TP)
    assert order.admit(TP, 0) is Verdict.WAIT
    assert order.expected(TP) is None


@settings(max_examples=300, deadline=None)
@given(
    log_end=st.integers(1, 40),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["fetch", "stale", "seek", "paused", "process", "empty", "dropped"]),
            st.integers(0, 40),
            st.integers(1, 8),
        ),
        max_size=40,
    ),
)
def test_delivery_is_contiguous_and_every_record_is_processed(
    log_end: int, steps: list[tuple[str, int, int]]
) -> None:
    """A consumer over a log of ``log_end`` records: fetches from its position, stale fetches
    (records from anywhere, handed over after a seek though fetched before it), seeks back to the
    committed offset or before it, fetches while the streams do not flow yet, agents processing
    their queue, faust emptying the queues, and faust dropping a fetch (its getmany stops mid-fetch
    when the flow stops or the generation changes; the streams resume after, emptying the queues).
    Whatever the mix, each record is first processed right after its predecessor, and fetching to
    the end processes every record."""
    order = InOrder()
    position = 0  # the broker-side fetch position
    queue: list[int] = []  # delivered, waiting for the agent
    processed: list[int] = []

    def seek(offset: int) -> None:
        nonlocal position
        order.seeking(TP)
        position = offset
        order.sought(TP, offset)

    def committed() -> int:  # commits cover processed records only, in a contiguous run
        done = set(processed)
        return next(o for o in range(log_end + 1) if o not in done)

    def fetch(first: int, count: int, stale: bool, flowing: bool = True) -> None:
        nonlocal position
        batch = range(first, min(first + count, log_end))
        if not stale:
            position = max(position, batch.stop)
        for offset in batch:
            verdict = order.admit(TP, offset, flowing)
            if verdict is Verdict.DELIVER and flowing:  # a stream skips what arrives before it flows
                queue.append(offset)
            elif verdict is Verdict.REWIND:
                seek(order.rewind_to(TP, earliest=0)[0])
                return  # the rest of this fetch is stale

    def process(count: int) -> None:
        for offset in queue[:count]:
            processed.append(offset)
            order.done(TP, offset)
        del queue[:count]

    seek(0)
    for kind, offset, count in steps:
        if kind == "fetch":
            fetch(position, count, stale=False)
        elif kind == "stale":
            fetch(offset % log_end, count, stale=True)
        elif kind == "paused":
            fetch(position, count, stale=False, flowing=False)
        elif kind == "process":
            process(count)
        elif kind in ("empty", "dropped"):
            if kind == "dropped":
                position = min(position + count, log_end)
            queue.clear()
            for offset in order.emptied().values():
                seek(offset)
        else:
            seek(min(offset, committed()))
    for _ in range(2 * log_end + 2):  # drain
        fetch(position, 8, stale=False)
        process(len(queue))
    assert set(processed) == set(range(log_end))
    first_seen: list[int] = []  # rewinds only repeat a prefix
    for offset in processed:
        if offset not in first_seen:
            first_seen.append(offset)
    assert first_seen == list(range(log_end))


def test_a_record_fetched_before_the_streams_flow_is_held_back_and_read_again() -> None:
    order = sought(InOrder(), 768)
    assert order.admit(TP, 768, flowing=False) is Verdict.REWIND
    assert order.rewind_to(TP, earliest=0) == (768, range(0))
    assert order.admit(TP, 767, flowing=False) is Verdict.DUPLICATE
    assert order.admit(TP, 768) is Verdict.DELIVER


def test_emptied_queues_read_a_partition_again_from_its_first_record_not_processed() -> None:
    order = sought(InOrder(), 3)
    assert [order.admit(TP, o) for o in (3, 4, 5)] == [Verdict.DELIVER] * 3
    order.done(TP, 3)  # processed; 4 and 5 were still in a queue when faust emptied it
    assert order.emptied() == {TP: 4}
    assert order.admit(TP, 6) is Verdict.WAIT
    sought(order, 4)
    assert order.admit(TP, 4) is Verdict.DELIVER


def test_emptied_queues_read_a_partition_whose_records_were_all_processed_from_its_next_offset() -> None:
    """Not from the committed offset: that processed a second time everything the agents finished
    since the last commit (found: turns sent while a rebalance ended counted as duplicates). Not left
    where it is either: faust may have dropped records it had fetched, and with nothing fetched
    after them no rewind would bring them back (found: a survivor stuck at 22 of 573 turns)."""
    order = sought(InOrder(), 3)
    for offset in (3, 4):
        assert order.admit(TP, offset) is Verdict.DELIVER
        order.done(TP, offset)
    assert order.emptied() == {TP: 5}
    assert order.admit(TP, 5) is Verdict.WAIT
    sought(order, 5)
    assert order.admit(TP, 5) is Verdict.DELIVER


def test_a_seek_back_forgets_the_records_it_fetches_again_and_a_revocation_forgets_them_all() -> None:
    order = sought(InOrder(), 3)
    assert [order.admit(TP, o) for o in (3, 4, 5)] == [Verdict.DELIVER] * 3
    sought(order, 4)  # 4 and 5 come again; 3 is still on its way through an agent
    assert order.emptied() == {TP: 3}
    sought(order, 3)
    order.forget(TP)
    assert order.emptied() == {}
    sought(order, 3)
    assert order.emptied() == {TP: 3}  # the pending records went with the revocation


def test_a_rewind_has_nothing_to_seek_once_the_partition_was_sought_emptied_or_revoked_meanwhile() -> None:
    """The consumer asks the broker for the earliest offset between the verdict and the rewind; the
    streams resuming (queues emptied), a seek or a revocation in that time leaves the partition to
    whoever did it (found: a worker crashed on KeyError right after a RocksDB restart)."""
    for meanwhile in (lambda o: o.emptied(), lambda o: o.seeking(TP), lambda o: o.forget(TP)):
        order = sought(InOrder(), 3)
        assert order.admit(TP, 5) is Verdict.REWIND
        meanwhile(order)
        assert order.rewind_to(TP, earliest=0) is None

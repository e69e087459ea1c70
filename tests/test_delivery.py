"""The rule deciding which fetched records reach the agents (streams/delivery.py): in offset
order, none skipped, whatever mix of stale and fresh fetches and seeks the consumer goes through."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.delivery import InOrder, Verdict

TP = ("turns", 0)


def sought(order: InOrder, offset: int) -> InOrder:
    order.seeking(TP)
    order.sought(TP, offset)
    return order


def test_nothing_is_delivered_before_the_partition_is_sought() -> None:
    order = InOrder()
    assert order.admit(TP, 0, order.fetch_begins()) is Verdict.WAIT
    sought(order, 0)
    assert order.admit(TP, 0, order.fetch_begins()) is Verdict.DELIVER


def test_records_fetched_before_a_rewind_are_dropped_and_the_partition_is_read_again_in_order() -> None:
    order = sought(InOrder(), 10)
    stale = order.fetch_begins()
    assert [order.admit(TP, o, stale) for o in (10, 11)] == [Verdict.DELIVER] * 2
    sought(order, 5)  # faust seeks back to the committed offset while 12.. are still on their way
    assert order.admit(TP, 12, stale) is Verdict.REWIND
    fresh = order.fetch_begins()
    assert [order.admit(TP, o, fresh) for o in range(5, 13)] == [Verdict.DELIVER] * 8
    assert order.admit(TP, 12, stale) is Verdict.DUPLICATE


def test_a_record_ahead_in_the_first_fetch_after_a_seek_is_a_gap_on_the_broker() -> None:
    order = sought(InOrder(), 3)
    during = order.fetch_begins()
    order.seeking(TP)  # a seek while that fetch was under way: its records prove nothing
    order.sought(TP, 3)
    assert order.admit(TP, 9, during) is Verdict.REWIND
    after = order.fetch_begins()
    assert order.admit(TP, 9, after) is Verdict.GAP  # 3-8 expired: nothing else will come
    assert order.admit(TP, 10, after) is Verdict.DELIVER
    assert order.admit(TP, 12, after) is Verdict.REWIND  # not the first record after a seek


def test_a_revoked_partition_waits_for_its_next_seek() -> None:
    order = sought(InOrder(), 0)
    order.forget(TP)
    assert order.admit(TP, 0, order.fetch_begins()) is Verdict.WAIT
    assert order.expected(TP) is None


@settings(max_examples=300, deadline=None)
@given(
    log_end=st.integers(1, 40),
    steps=st.lists(
        st.tuples(st.sampled_from(["fetch", "stale", "seek"]), st.integers(0, 40), st.integers(1, 8)),
        max_size=40,
    ),
)
def test_delivery_is_contiguous_and_every_record_arrives(
    log_end: int, steps: list[tuple[str, int, int]]
) -> None:
    """A consumer over a log of ``log_end`` records: fetches from its position, stale fetches
    (records from anywhere, handed over after a seek though fetched before it), and seeks back to
    any offset not past what was delivered (faust seeks to the committed offset). Whatever the
    mix, the delivered offsets continue each other, and fetching to the end delivers every record."""
    order = InOrder()
    position = 0  # the broker-side fetch position
    delivered: list[int] = []
    before_last_seek: dict[object, int] = {}

    def seek(offset: int) -> None:
        nonlocal position, before_last_seek
        before_last_seek = order.fetch_begins()
        order.seeking(TP)
        position = offset
        order.sought(TP, offset)

    def fetch(first: int, count: int, begins: dict[object, int]) -> None:
        nonlocal position
        batch = range(first, min(first + count, log_end))
        if begins is not before_last_seek:
            position = max(position, batch.stop)
        rewound = False
        for offset in batch:
            verdict = order.admit(TP, offset, begins)
            if verdict in (Verdict.DELIVER, Verdict.GAP):
                assert verdict is Verdict.DELIVER  # the log has no holes
                assert not delivered or offset == delivered[-1] + 1 or offset <= delivered[-1]
                delivered.append(offset)
            elif verdict is Verdict.REWIND and not rewound:
                rewound = True
                expected = order.expected(TP)
                assert expected is not None
                seek(expected)

    seek(0)
    for kind, offset, count in steps:
        if kind == "fetch":
            fetch(position, count, order.fetch_begins())
        elif kind == "stale":
            fetch(offset % log_end, count, before_last_seek)
        else:
            seek(min(offset, (delivered[-1] + 1) if delivered else 0))
    for _ in range(2 * log_end + 2):  # drain
        fetch(position, 8, order.fetch_begins())
    assert set(delivered) == set(range(log_end))
    # Rewinds only repeat a prefix: each record after its predecessor, the first time it arrives.
    first_seen: list[int] = []
    for offset in delivered:
        if offset not in first_seen:
            first_seen.append(offset)
    assert first_seen == list(range(log_end))

"""The leases a worker's recall threads hold on partitions' stores (memstream.embedded_store.read_leases)."""

from __future__ import annotations

import threading
import time

from memstream.embedded_store.read_leases import ReadLeases


def test_at_most_limit_reads_run_at_once_over_all_partitions() -> None:
    leases = ReadLeases(limit=2)
    assert leases.try_enter(0) and leases.try_enter(1)
    assert not leases.try_enter(0)  # shed: the caller answers 503
    leases.exit(1)
    assert leases.try_enter(0)
    assert leases.reading(0) == 2 and leases.reading(1) == 0


def test_a_release_waits_for_the_reads_of_its_partitions_only() -> None:
    leases = ReadLeases(limit=4)
    assert leases.try_enter(3) and leases.try_enter(5)
    assert leases.wait_idle([7], timeout_s=0.0)  # nothing reads partition 7
    started = time.monotonic()
    assert not leases.wait_idle([3], timeout_s=0.2)  # still read: the wait times out
    assert time.monotonic() - started >= 0.2

    done = threading.Timer(0.1, leases.exit, args=(3,))  # the recall thread finishes
    done.start()
    assert leases.wait_idle([3], timeout_s=5.0)
    done.join()
    assert leases.reading(3) == 0 and leases.reading(5) == 1

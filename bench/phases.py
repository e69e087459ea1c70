"""Replay a many-user set through a running `memstream up` and time its phases, for the
consolidation benches (bench/consolidation.py, bench/settle.py).

The worker's idle close is short (``WORKER_ENV``: 3 s, checked every second; durative memory 2 s
after a month closes) so that the waits measure work, not timers. Clocks are ``time.monotonic``."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.harness import wait
from bench.users import sessions, sessions_closed
from memstream.adapters.kafka import settled
from memstream.adapters.settings import Settings
from memstream.apps.datasets import RawRecord
from memstream.apps.replay import replay
from memstream.apps.status import fetch_status

IDLE_CLOSE_S, IDLE_CHECK_S = 3, 1
WORKER_ENV = {
    "MEMSTREAM_IDLE_CLOSE_S": str(IDLE_CLOSE_S),
    "MEMSTREAM_IDLE_CHECK_INTERVAL_S": str(IDLE_CHECK_S),
    "MEMSTREAM_DURATIVE_DELAY_S": "2",
}


@dataclass(frozen=True)
class Phases:
    started: float  # the replay began, once the worker owned every partition (start-up is no part of ingest)
    ingested: float  # every turn processed (the turns topic committed past the last one)
    windows_closed: float  # every session window closed, the last ones by idleness
    settled: float  # then every topic committed to its end, twice in a row


def replay_until_settled(
    settings: Settings,
    records: Sequence[RawRecord],
    proc: subprocess.Popen[bytes],
    log: Path,
    deadline: float,
) -> Phases:
    """Replay ``records`` through the worker ``proc`` (its log ``log``) and wait until consolidation
    settled; every wait ends by ``deadline`` (monotonic) or when the worker exits."""

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    every = list(range(settings.kafka.topic_partitions))
    wait(lambda: fetch_status(settings)["partitions"] == every, left(), "the partitions", proc, log)
    started = time.monotonic()
    report = asyncio.run(replay(settings, list(records), wait=True, wait_timeout=left(), progress=False))
    if not report.processed:
        raise SystemExit(f"the worker did not process every turn in time; see {log}")
    ingested = time.monotonic()
    count = sessions(records)
    # Every session window closed: as many closes as the set has sessions, and not before the idle
    # close (a timer) can have fired after ingest.
    wait(
        lambda: (
            time.monotonic() - ingested >= IDLE_CLOSE_S + IDLE_CHECK_S
            and sessions_closed(fetch_status(settings), count)
        ),
        left(),
        "every session to close",
        proc,
        log,
    )
    windows_closed = time.monotonic()
    wait(lambda: asyncio.run(settled(settings)), left(), "consolidation to settle", proc, log)
    return Phases(started, ingested, windows_closed, time.monotonic())

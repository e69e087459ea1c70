"""Worker restart with per-user table state: MEMSTREAM_TABLE_STORE=memory against rocksdb.

    python -m bench.restart [--users 500] [--state-users 100000] [--stores memory,rocksdb] [--json]

For each store: its own Tansu broker and one `memstream up` (one worker, every role, hash embedder,
idle windows never closed). First --users users' first --turns-per-user turns (the sample
conversations renamed, bench/users.py) go through the pipeline, so the window-state table and its
changelog hold real states. Then, the worker stopped, --state-users more users' states are written
straight to the window-state changelog (copies of those real states under new user keys, each on
its key's partition, one record per produce batch as faust writes them against Tansu): state of
many users without ingesting their turns. The worker is then started three times on the same data
dir, each time timed from the start of the process:

* ``cold``: the first start after the fill: every store reads the whole changelog (rocksdb has
  not seen the new users yet);
* ``warm``: after a clean stop (SIGTERM): memory reads the whole changelog again, rocksdb only
  what lies past the offsets its directory holds;
* ``killed``: after SIGKILL, the same.

Each start reports ``recovered_s``, to faust's "Worker ready" in the log (the tables recovered,
the streams resumed), ``ready_s``, to a new user's turn, produced at the start, processed and
committed (nothing is processed before the tables are recovered), and the worker's RSS then.
Figures depend on the machine and the broker; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import signal
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.harness import start_up, stop, wait
from bench.soak import memory_kib
from bench.users import many_users, source_records
from memstream.adapters.broker import Broker, free_port
from memstream.adapters.kafka import by_key, client_kwargs, read_topic, wait_processed
from memstream.adapters.settings import Settings
from memstream.apps.datasets import RawRecord
from memstream.apps.replay import replay
from memstream.apps.status import fetch_status
from memstream.schemas.events import Turn
from memstream.schemas.topics import TURNS

READY = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \[(\d+)\] \[INFO\] \[\^-+Recovery\]: Worker ready"
)


def probe_turn(n: int) -> RawRecord:
    """A turn of a user no one has seen: processed only once the tables are recovered."""
    turn = Turn.model_validate(
        {
            "tenant": "restart",
            "user_id": f"probe-{n}",
            "session_id": f"probe-{n}",
            "turn_id": "t1",
            "ts": "2025-03-03T10:00:00Z",
            "messages": [{"speaker": "Ann", "role": "user", "content": "I am back."}],
        }
    )
    return RawRecord(turn.key, turn.to_bytes())


def ready_at(log: Path, pid: int) -> float | None:
    """Wall-clock time (epoch seconds) of faust's "Worker ready" of process ``pid``."""
    for line in log.read_text(errors="replace").splitlines():
        m = READY.match(line)
        if m and int(m.group(2)) == pid:
            return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def changelog(settings: Settings) -> str:
    return f"{settings.kafka.app_id}-window-state-changelog"


def changelog_records(settings: Settings) -> int:
    """Records in the window-state changelog (its end offsets, summed over partitions)."""

    async def count() -> int:
        consumer = AIOKafkaConsumer(**client_kwargs(settings))
        await consumer.start()
        try:
            tps = [TopicPartition(changelog(settings), p) for p in range(settings.kafka.topic_partitions)]
            return sum((await consumer.end_offsets(tps)).values())
        finally:
            await consumer.stop()

    return asyncio.run(count())


def fill(settings: Settings, users: int) -> float:
    """``users`` new users' window states on the changelog, copied from the real ones; seconds."""
    t0 = time.monotonic()
    states = [v for _, v in asyncio.run(read_topic(settings, changelog(settings)))]
    if not states:
        raise SystemExit("no window state on the changelog to copy")

    async def send() -> None:
        # One record per produce batch (faust's producer_max_batch_size=1 against Tansu).
        p = AIOKafkaProducer(**client_kwargs(settings), partitioner=by_key, acks="all", max_batch_size=1)
        await p.start()
        try:
            for start in range(0, users, 2000):
                sent = [
                    await p.send(changelog(settings), states[i % len(states)], key=b"restart/s%07d" % i)
                    for i in range(start, min(users, start + 2000))
                ]
                await asyncio.gather(*sent)
        finally:
            await p.stop()

    asyncio.run(send())
    return time.monotonic() - t0


def timed_start(
    broker: Broker, work: Path, overrides: dict[str, str], n: int, timeout: float, kill: bool
) -> dict[str, Any]:
    """Start the worker, time it to ready (see the module), then stop it (SIGKILL if ``kill``)."""
    started = time.time()
    settings, proc, log = start_up(broker, work, **overrides)
    try:
        probe = asyncio.run(replay(settings, [probe_turn(n)], progress=False))
        done = asyncio.run(
            wait_processed(settings, settings.kafka.topic(TURNS.name), probe.last_offsets, timeout, poll=0.1)
        )
        ready_s = time.time() - started
        if not done:
            raise SystemExit(f"the probe turn was not processed in {timeout:.0f}s; see {log}")
        rss_kib, _ = memory_kib(proc.pid)
        recovered = ready_at(log, proc.pid)
        if kill:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    finally:
        stop(proc)
    return {
        "recovered_s": round(recovered - started, 1) if recovered else None,
        "ready_s": round(ready_s, 1),
        "rss_mib": round(rss_kib / 1024),
    }


def run_one(
    store: str, records: list[RawRecord], state_users: int, timeout: float, keep: bool
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"memstream-restart-{store}-"))
    overrides = {
        "MEMSTREAM_TABLE_STORE": store,
        "MEMSTREAM_IDLE_CLOSE_S": "86400",
        "MEMSTREAM_LOG_LEVEL": "INFO",
        "MEMSTREAM_METRICS_PORT": str(free_port()),
    }
    try:
        with Broker(free_port(), work / "tansu.log") as broker:
            settings, proc, log = start_up(broker, work, **overrides)
            try:
                t0 = time.monotonic()
                report = asyncio.run(
                    replay(settings, records, wait=True, wait_timeout=timeout, progress=False)
                )
                if not report.processed:
                    raise SystemExit(f"the turns were not processed in {timeout:.0f}s; see {log}")
                ingest_s = time.monotonic() - t0
                wait(lambda: fetch_status(settings)["partitions"], 60, "the partitions", proc, log)
            finally:
                stop(proc)
            fill_s = fill(settings, state_users) if state_users else 0.0
            entries = changelog_records(settings)
            print(
                f"{store}: {len(records)} turns in {ingest_s:.0f}s, {state_users} more states in "
                f"{fill_s:.0f}s, {entries} changelog records",
                file=sys.stderr,
                flush=True,
            )
            starts = {}
            for n, (name, kill) in enumerate([("cold", False), ("warm", True), ("killed", False)]):
                starts[name] = timed_start(broker, work, overrides, n, timeout, kill)
                print(f"{store} {name}: {starts[name]}", file=sys.stderr, flush=True)
        return {
            "store": store,
            "turns": len(records),
            "window_state_changelog_records": entries,
            "ingest_s": round(ingest_s, 1),
            "fill_s": round(fill_s, 1),
            **starts,
        }
    finally:
        if keep:
            print(f"{store}: work dir {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=500, help="users whose turns go through the pipeline")
    p.add_argument("--turns-per-user", type=int, default=2)
    p.add_argument("--state-users", type=int, default=100_000, help="users' states written to the changelog")
    p.add_argument("--stores", default="memory,rocksdb")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--keep", action="store_true", help="keep the work directories")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    records = many_users(source_records("sample"), args.users, args.turns_per_user)
    results = [run_one(s, records, args.state_users, args.timeout, args.keep) for s in args.stores.split(",")]
    out = {"users": args.users, "state_users": args.state_users, "runs": results}
    print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() if args.json else out)


if __name__ == "__main__":
    main()

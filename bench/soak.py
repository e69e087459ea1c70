"""Slow consumer soak: worker memory (RSS) and the lag gauge while one worker drains a long backlog.

    python -m bench.soak [--turns 50000] [--users 200] [--max-seconds 600] [--json] [--samples]

Starts its own Tansu broker and one `memstream up` (one worker, every role, hash embedder, no
gateway), warms it up (partitions owned, first turns stored), then produces --turns generated
turns (memstream.apps.sample_conversations, --users users interleaved day by day) into the turns
topic as fast as the producer goes, so that a backlog builds up while the worker reads. Every second while the
worker drains it, it samples

* the RSS of `memstream up` and of every process below it (Linux: /proc/<pid>/status; VmRSS,
  and RssAnon, the heap and other private memory, apart from mapped files such as the store's);
* the worker's /metrics: `memstream_consumer_lag` of the turns topic (summed over partitions;
  the worker updates it every 5 s) and `memstream_turns_ingested_total` (the x axis of the memory fit).

Drained means: the group has committed past the last turn produced, and the lag gauge reads 0.
Consolidation and indexing (topics after ingest) may still be behind: with --settle it then waits
until they are settled too (`memstream.adapters.kafka.settled`; `consolidation_settle_s`), still sampling
(the deadline still holds). Then it
stops the pipeline and counts the units stored. It reports RSS after warm-up, at its peak and at
the end (after the settling), and the growth per 10,000 turns over the second half of the drain (a least
squares line through the samples whose turn count is past half of the backlog): bounded memory
shows as a slope near zero there, a per-turn leak as a steady slope.

Everything is bounded: the whole run by --max-seconds (a drain not done by then is reported as
`drained: false`), every wait and the sampler by that deadline; every process it starts is
stopped (`memstream up` by SIGTERM, then its own process group; the broker by its context).
Progress goes to stderr. The core, :func:`run`, is what tests/test_soak.py runs with a small
backlog.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from bench.harness import start_up, stop, wait
from memstream.adapters.broker import Broker, free_port
from memstream.adapters.embedders import make_embedder
from memstream.adapters.kafka import settled, wait_processed
from memstream.adapters.store import all_stores, open_shards, scroll_all
from memstream.apps.datasets import RawRecord
from memstream.apps.replay import replay
from memstream.apps.sample_conversations import generate
from memstream.apps.status import fetch_status
from memstream.core.unit_views import views_spec
from memstream.core.units import UNITS, unit_from_payload, units_spec
from memstream.schemas.topics import TURNS

WARMUP_TURNS = 50
TENANT = "soak"


@dataclass
class Sample:
    """One sample: seconds since the backlog started, memory of the pipeline's processes (KiB),
    and what its /metrics said (None when the scrape failed)."""

    t: float
    rss_kib: int
    anon_kib: int
    ingested: float | None
    lag: float | None


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, from /proc (children may come and go: best effort)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The command name (2nd field) is in parentheses and may hold spaces: split after it.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < 10_000:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
    return out


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, RssAnon) in KiB summed over ``pid`` and its descendants; 0 for a process gone."""
    rss = anon = 0
    for p in descendants(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
                elif line.startswith("RssAnon:"):
                    anon += int(line.split()[1])
    return rss, anon


def scrape(port: int, timeout: float = 3.0) -> tuple[float, float] | None:
    """(turns ingested, consumer lag summed over partitions) from a worker's /metrics; None when
    it did not answer in time (the web server shares the worker's event loop)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    ingested = lag = 0.0
    for line in text.splitlines():
        if line.startswith("memstream_turns_ingested_total{"):
            ingested += float(line.rsplit(" ", 1)[1])
        elif line.startswith("memstream_consumer_lag{") and 'turns"' in line:  # topic="<prefix>turns"
            lag += float(line.rsplit(" ", 1)[1])
    return ingested, lag


class Sampler(threading.Thread):
    """Samples every ``interval`` seconds until stopped or ``deadline`` (time.monotonic)."""

    def __init__(self, pid: int, port: int, interval: float, deadline: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.port, self.interval, self.deadline = pid, port, interval, deadline
        self.samples: list[Sample] = []
        self.t0 = time.monotonic()
        self.halt = threading.Event()

    def sample(self) -> Sample:
        rss, anon = memory_kib(self.pid)
        got = scrape(self.port)
        s = Sample(round(time.monotonic() - self.t0, 2), rss, anon, *(got if got else (None, None)))
        self.samples.append(s)
        return s

    def run(self) -> None:
        while not self.halt.wait(self.interval) and time.monotonic() < self.deadline:
            s = self.sample()
            if len(self.samples) % 10 == 0:
                print(
                    f"  {s.t:6.0f}s  ingested {s.ingested}  lag {s.lag}  rss {s.rss_kib / 1024:.0f} MiB "
                    f"(anon {s.anon_kib / 1024:.0f})",
                    file=sys.stderr,
                    flush=True,
                )

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)


def slope_per_10k(points: list[tuple[float, float]]) -> float | None:
    """Least squares slope of y (KiB) over x (turns), as MiB per 10,000 turns."""
    if len({x for x, _ in points}) < 2:
        return None
    xs, ys = zip(*points, strict=True)
    return round(statistics.linear_regression(xs, ys).slope * 10_000 / 1024, 2)


def summarize(
    samples: list[Sample], baseline: Sample, warm: int, turns: int, drain_s: float
) -> dict[str, Any]:
    """RSS and lag figures of a drain (``samples`` after ``baseline``, taken after warm-up; the
    drain ended ``drain_s`` after the first sample's clock started)."""
    scraped = [s for s in samples if s.ingested is not None]
    half = warm + turns / 2
    # The second half of the drain: later samples (settling) would only flatten the line.
    second = [s for s in scraped if s.ingested is not None and s.ingested >= half and s.t <= drain_s]
    lags = [s.lag for s in scraped if s.lag is not None]

    def memory(kib: Callable[[Sample], float]) -> dict[str, float | None]:
        mib = lambda s: round(kib(s) / 1024, 1)  # noqa: E731
        return {
            "after_warmup": mib(baseline),
            "peak": max(mib(s) for s in [baseline, *samples]),
            "final": mib(samples[-1] if samples else baseline),
            "second_half_growth_per_10k_turns": slope_per_10k([(s.ingested or 0.0, kib(s)) for s in second]),
        }

    return {
        "samples": len(samples),
        "failed_scrapes": len(samples) - len(scraped),
        "rss_mib": memory(lambda s: s.rss_kib),
        "anon_rss_mib": memory(lambda s: s.anon_kib),
        "second_half_samples": len(second),
        "lag": {
            "max": max(lags) if lags else None,
            "at_end": lags[-1] if lags else None,
            "visible_during_drain": any(v > 0 for v in lags),
        },
    }


def turns_of(users: int, count: int) -> Iterator[RawRecord]:
    """``count`` generated turns of ``users`` users (a year of days is ~1,000 turns per 1 user)."""
    for turn in islice(generate(users=users, days=3650, tenant=TENANT), count):
        yield RawRecord(turn.key, turn.to_bytes())


def run(
    turns: int,
    users: int = 200,
    max_seconds: float = 600.0,
    interval: float = 1.0,
    roles: str | None = None,
    keep_samples: bool = False,
    keep_data: bool = False,
    settle: bool = False,
) -> dict[str, Any]:
    """One soak (see the module's docstring); the figures as a dict. Its work directory (store,
    logs) is removed at the end unless ``keep_data``."""
    start = time.monotonic()
    deadline = start + max_seconds
    records = list(turns_of(users, WARMUP_TURNS + turns))
    if len(records) < WARMUP_TURNS + turns:
        raise ValueError(f"{users} users give only {len(records)} turns; ask for more users")
    warm, backlog = records[:WARMUP_TURNS], records[WARMUP_TURNS:]
    work = Path(tempfile.mkdtemp(prefix="memstream-soak-"))
    try:
        result = _soak(work, warm, backlog, turns, users, deadline, interval, roles, settle)
    except BaseException:
        print(f"failed; its logs are in {work}", file=sys.stderr, flush=True)
        raise
    if not keep_data:
        shutil.rmtree(work, ignore_errors=True)
    if keep_data:
        result["work_dir"] = str(work)
    if keep_samples:
        result["series"] = [asdict(s) for s in result.pop("_samples")]
    else:
        result.pop("_samples")
    return result


def _soak(
    work: Path,
    warm: list[RawRecord],
    backlog: list[RawRecord],
    turns: int,
    users: int,
    deadline: float,
    interval: float,
    roles: str | None,
    settle: bool,
) -> dict[str, Any]:
    left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
    with Broker(free_port(), work / "tansu.log") as broker:
        settings, proc, log = start_up(broker, work, **({"MEMSTREAM_ROLES": roles} if roles else {}))
        sampler = Sampler(proc.pid, settings.worker.metrics_port, interval, deadline)
        drained = False
        consolidated: bool | None = None
        settle_s: float | None = None
        try:
            print(f"work dir {work}; warming up", file=sys.stderr, flush=True)
            warm_report = asyncio.run(replay(settings, warm, wait=True, wait_timeout=left(), progress=False))
            if not warm_report.processed:
                raise SystemExit(f"the worker never processed the warm-up turns; see {log}")
            every = list(range(settings.kafka.topic_partitions))
            wait(lambda: fetch_status(settings)["partitions"] == every, left(), "the partitions", proc, log)
            baseline = sampler.sample()
            sampler.samples.clear()
            print(
                f"warm: rss {baseline.rss_kib / 1024:.0f} MiB; producing {turns} turns of {users} users",
                file=sys.stderr,
                flush=True,
            )
            sampler.t0 = time.monotonic()
            sampler.start()
            report = asyncio.run(replay(settings, backlog, total=turns, progress=False))
            print(
                f"produced {report.produced} turns in {report.seconds:.1f}s ({report.rate:,.0f}/s); draining",
                file=sys.stderr,
                flush=True,
            )
            topic = settings.kafka.topic(TURNS.name)
            drained = asyncio.run(wait_processed(settings, topic, report.last_offsets, left(), poll=0.5))
            drain_s = time.monotonic() - sampler.t0
            if drained:
                # The gauge is set every 5 s: wait for a reading of 0 (or the deadline).
                lag_zero = time.monotonic() + min(30.0, left())
                while time.monotonic() < lag_zero and not (
                    sampler.samples and sampler.samples[-1].lag == 0 and sampler.is_alive()
                ):
                    time.sleep(interval)
                if not sampler.is_alive():
                    sampler.sample()  # the deadline stopped the sampler: one last reading
            if drained and settle:
                # Consolidation and indexing run behind ingest: their topics drained too (or the deadline).
                t_settle = time.monotonic()
                while not (consolidated := asyncio.run(settled(settings))) and time.monotonic() < deadline:
                    time.sleep(1.0)
                settle_s = round(time.monotonic() - t_settle, 1)
                print(f"consolidation settled {consolidated} after {settle_s}s more", file=sys.stderr)
        finally:
            sampler.halt.set()
            if sampler.is_alive():
                sampler.stop()
            stop(proc)
        print(f"{'drained' if drained else 'NOT drained'} after {drain_s:.1f}s", file=sys.stderr, flush=True)

        shards = open_shards(
            settings.storage,
            [
                units_spec(make_embedder(settings.embedding).dim),
                views_spec(make_embedder(settings.embedding).dim),
            ],
        )
        try:
            stored = {
                f"{u.key}/{u.turn_id}"
                for store in all_stores(shards, settings.kafka.topic_partitions)
                for h in scroll_all(store, UNITS)
                for u in [unit_from_payload(h.payload)]
            }
        finally:
            shards.close()
    expected = {f"{t.key}/{orjson.loads(t.value)['turn_id']}" for t in [*warm, *backlog]}
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": f"{platform.python_implementation()} {platform.python_version()}",
        },
        "turns": turns,
        "users": users,
        "roles": settings.worker.roles,
        "produce_s": round(report.seconds, 1),
        "produce_turns_per_s": round(report.rate, 1),
        "drained": drained,
        "drain_s": round(drain_s, 1),
        "throughput_turns_per_s": round(turns / drain_s, 1) if drained else None,
        "consolidation_settled": consolidated,
        "consolidation_settle_s": settle_s,
        "stored": len(stored & expected),
        "expected": len(expected),
        **summarize(sampler.samples, baseline, WARMUP_TURNS, turns, drain_s),
        "_samples": sampler.samples,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=50_000, help="turns in the backlog (default 50,000)")
    p.add_argument("--users", type=int, default=200, help="users the turns are spread over (default 200)")
    p.add_argument(
        "--max-seconds", type=float, default=600.0, help="bound on the whole run, start-up included (600)"
    )
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    p.add_argument("--roles", default=None, help="MEMSTREAM_ROLES of the worker (default: every role)")
    p.add_argument("--json", action="store_true", help="print one JSON object (default: a summary)")
    p.add_argument("--samples", action="store_true", help="include every sample in the JSON (`series`)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (store, logs)")
    p.add_argument(
        "--settle", action="store_true", help="after the drain, wait for consolidation to catch up too"
    )
    args = p.parse_args()
    if args.turns < 1 or args.users < 1 or args.max_seconds <= 0 or args.interval <= 0:
        p.error("--turns, --users, --max-seconds and --interval must be positive")
    # SIGTERM (a `timeout`, a CI runner) unwinds like Ctrl-C, so the pipeline and broker are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = run(
        args.turns,
        args.users,
        args.max_seconds,
        args.interval,
        args.roles,
        keep_samples=args.samples,
        keep_data=args.keep,
        settle=args.settle,
    )
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        return
    rss, anon, lag = result["rss_mib"], result["anon_rss_mib"], result["lag"]
    print(
        f"{result['turns']} turns: drained {result['drained']} in {result['drain_s']} s "
        f"({result['throughput_turns_per_s']} turns/s), stored {result['stored']}/{result['expected']}\n"
        f"RSS MiB after warm-up {rss['after_warmup']}, peak {rss['peak']}, final {rss['final']}, "
        f"second half {rss['second_half_growth_per_10k_turns']} MiB per 10k turns "
        f"(anon: {anon['after_warmup']}, {anon['peak']}, {anon['final']}, "
        f"{anon['second_half_growth_per_10k_turns']})\n"
        f"lag max {lag['max']}, at end {lag['at_end']}, "
        f"visible during the drain {lag['visible_during_drain']}"
    )


if __name__ == "__main__":
    main()

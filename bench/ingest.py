"""End-to-end ingest throughput: turns/s through the real broker, processor and store, next to
the embedder's own throughput measured in the same run.

    python bench/ingest.py --embedder hash|minilm --turns N [--workers W] [--broker tansu|kafka] --json

Each run starts a broker (Tansu, or Apache Kafka with --broker kafka: `memstream up`'s embedded
one, memstream/adapters/embedded_broker.py) and `memstream up` with W worker processes, warms them up
(every partition owned, model loaded), produces N generated turns, and times until the workers
have committed past the last one; then stops them, counts what the units collection holds, and
measures the embedder alone and the ingest processor alone (no broker, no faust) on the same turns.
Medians over --repeat runs, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

# The repository root, for bench/harness.py when run as `python bench/ingest.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.harness import bench_broker, broker_env
from memstream.adapters.broker import free_ports
from memstream.adapters.embedded_broker import BrokerKind
from memstream.adapters.embedders import make_embedder
from memstream.adapters.settings import Settings
from memstream.adapters.store import all_stores, open_shards, scroll_all
from memstream.apps.datasets import RawRecord
from memstream.apps.replay import replay
from memstream.apps.sample_conversations import generate
from memstream.apps.status import fetch_status
from memstream.core.unit_views import views_spec, with_sentences
from memstream.core.units import UNITS, render_text, unit_from_payload, units_spec
from memstream.schemas.events import Turn
from memstream.streams.ingest import Incoming, IngestProcessor


def embedder_rate(settings: Settings, texts: list[str]) -> float:
    """The embedder alone on what ingest embeds for ``texts`` (each turn, and the sentences of a turn of
    several: ``with_sentences``), in calls of the pipeline's batch size (turns/s)."""
    embedder = make_embedder(settings.embedding)
    batches = [
        with_sentences(texts[i : i + settings.worker.batch_size])[0]
        for i in range(0, len(texts), settings.worker.batch_size)
    ]
    embedder.embed(batches[0][: settings.embedding.embed_batch_size])  # warm-up
    t0 = time.perf_counter()
    for batch in batches:
        embedder.embed(batch)
    return len(texts) / (time.perf_counter() - t0)


def processor_rate(settings: Settings, turns: list[Turn], work: Path) -> float:
    """The ingest processor alone (no broker, no faust) on the same turns, fresh store (turns/s)."""
    alone = settings.replace(data_dir=work / "alone")
    embedder = make_embedder(alone.embedding)
    shards = open_shards(alone.storage, [units_spec(embedder.dim), views_spec(embedder.dim)])
    processor = IngestProcessor(alone, embedder, shards)
    records = [Incoming(t.to_bytes(), t.key, "turns") for t in turns]
    state: dict[bytes, Any] = {}

    async def feed() -> None:
        for i in range(0, len(records), alone.worker.batch_size):
            state.update(
                (await processor.process(records[i : i + alone.worker.batch_size], state)).window_state
            )

    t0 = time.perf_counter()
    asyncio.run(feed())
    rate = len(records) / (time.perf_counter() - t0)
    shards.close()
    return rate


def run_once(embedder: str, turns: int, users: int, workers: int, broker_kind: BrokerKind) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="memstream-bench-"))
    with bench_broker(broker_kind, work) as broker:
        env = {
            **os.environ,
            **broker_env(broker),
            "MEMSTREAM_DATA_DIR": str(work / "data"),
            "MEMSTREAM_EMBEDDER": embedder,
            "MEMSTREAM_METRICS_PORT": str(free_ports(workers)),
            "MEMSTREAM_GATEWAY_PORT": "0",
            "MEMSTREAM_LOG_LEVEL": "WARNING",
            "MEMSTREAM_WORKERS": str(workers),
            # The ingest pipeline alone: consolidation has its own benchmark (bench/consolidation.py)
            # and, deployed, its own workers; here it would compete for the same two cores.
            "MEMSTREAM_ROLES": "ingest",
        }
        settings = Settings.from_env(env)
        sample = list(islice(generate(users=users, days=365, tenant="bench"), turns + 50))
        warm, main = sample[:50], sample[50 : 50 + turns]
        texts = [render_text(t.messages) for t in main]

        proc = subprocess.Popen(
            [sys.executable, "-m", "memstream.apps.cli", "up"],
            env=env,
            stdout=(work / "worker.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        try:
            warm_report = asyncio.run(
                replay(
                    settings,
                    [RawRecord(t.key, t.to_bytes()) for t in warm],
                    wait=True,
                    wait_timeout=300,
                    progress=False,
                )
            )
            if not warm_report.processed:
                raise SystemExit(f"worker never processed the warm-up turns; see {work / 'worker.log'}")
            # Measure only once the group is stable, so no rebalance falls inside the timing.
            deadline = time.monotonic() + 120
            while fetch_status(settings).get("partitions") != list(range(settings.kafka.topic_partitions)):
                if time.monotonic() > deadline:
                    raise SystemExit(f"workers never shared out the partitions; see {work / 'worker.log'}")
                time.sleep(0.5)
            records = [RawRecord(t.key, t.to_bytes()) for t in main]
            t0 = time.perf_counter()
            report = asyncio.run(replay(settings, records, wait=True, wait_timeout=1800, progress=False))
            elapsed = time.perf_counter() - t0
            if not report.processed:
                raise SystemExit(f"worker did not finish; see {work / 'worker.log'}")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)

        shards = open_shards(
            settings.storage,
            [
                units_spec(make_embedder(settings.embedding).dim),
                views_spec(make_embedder(settings.embedding).dim),
            ],
        )
        units = [
            unit_from_payload(h.payload)
            for store in all_stores(shards, settings.kafka.topic_partitions)
            for h in scroll_all(store, UNITS)
        ]
        keys = Counter(f"{u.key}/{u.turn_id}" for u in units)
        shards.close()
        expected = {f"{t.key}/{t.turn_id}" for t in main}
        stored = sum(1 for k in keys if k in expected)
        duplicates = sum(n - 1 for n in keys.values())

        return {
            "end_to_end_turns_per_s": round(turns / elapsed, 1),
            "embedder_turns_per_s": round(embedder_rate(settings, texts), 1),
            "processor_only_turns_per_s": round(processor_rate(settings, main, work), 1),
            "stored": stored,
            "duplicates": duplicates,
            "produce_turns_per_s": round(report.rate, 1),
            "elapsed_s": round(elapsed, 2),
            "batch_size": settings.worker.batch_size,
            "workers": workers,
        }


def run(
    embedder: str, turns: int, users: int, repeat: int, workers: int, broker_kind: BrokerKind = "tansu"
) -> dict[str, Any]:
    """``repeat`` fresh runs (broker, worker, store); medians, and the ratio of the medians."""
    runs = []
    for i in range(repeat):
        runs.append(run_once(embedder, turns, users, workers, broker_kind))
        r = runs[-1]
        print(
            f"run {i + 1}/{repeat}: {r['end_to_end_turns_per_s']:,.0f} turns/s end to end, embedder "
            f"{r['embedder_turns_per_s']:,.0f} turns/s",
            file=sys.stderr,
            flush=True,
        )
    e2e = statistics.median(r["end_to_end_turns_per_s"] for r in runs)
    emb = statistics.median(r["embedder_turns_per_s"] for r in runs)
    alone = statistics.median(r["processor_only_turns_per_s"] for r in runs)
    return {
        "embedder": embedder,
        "broker": broker_kind,
        "turns": turns,
        "users": users,
        "repeat": repeat,
        "workers": workers,
        "end_to_end_turns_per_s": e2e,
        "embedder_turns_per_s": emb,
        "ratio": round(e2e / emb, 3),
        "processor_only_turns_per_s": alone,
        "stored": min(r["stored"] for r in runs),
        "duplicates": sum(r["duplicates"] for r in runs),
        "runs": runs,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.python_implementation()} "
        f"{platform.python_version()}",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--embedder", choices=["hash", "minilm"], default="hash")
    p.add_argument("--turns", type=int, default=10_000)
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3, help="fresh runs; medians are reported (default 3)")
    p.add_argument("--workers", type=int, default=1, help="worker processes of `memstream up` (default 1)")
    p.add_argument("--broker", choices=["tansu", "kafka"], default="tansu", help="(default tansu)")
    p.add_argument("--json", action="store_true", help="print one JSON object (default: a readable line)")
    args = p.parse_args()
    result = run(args.embedder, args.turns, args.users, args.repeat, args.workers, args.broker)
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        print(
            f"{result['embedder']} on {result['broker']}: {result['end_to_end_turns_per_s']:,.0f} turns/s "
            f"end to end, embedder {result['embedder_turns_per_s']:,.0f} turns/s, "
            f"ratio {result['ratio']:.2f}, stored {result['stored']}/{result['turns']}, "
            f"duplicates {result['duplicates']}"
        )


if __name__ == "__main__":
    main()

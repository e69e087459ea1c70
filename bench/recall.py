"""Recall latency without an LLM: p50 / p95 / p99 of ``memstream.core.recall.engine.recall`` on a store
holding N units and the memories consolidation built from them.

    python bench/recall.py --units 100000 --embedder hash --queries 300 --json
    python bench/recall.py --units 100000 --users 1000 --lexical 0 100 --json   # dense-only vs lexical

Builds the store in process (generated conversations through the ingest processor, then the
extractive consolidators), then times recall for questions drawn from the generator's topics,
for random users, with ``now`` = the user's last turn. The store is the embedded Qdrant Edge.
With several ``--lexical`` values, each question is timed once per value, in turn, on the same store.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from memstream.adapters.embedders import make_embedder
from memstream.adapters.settings import EmbeddingSettings, Settings, StorageSettings
from memstream.adapters.store.shards import EdgeShards
from memstream.apps.sample_conversations import generate
from memstream.core.memories import MEMORIES, memories_spec
from memstream.core.recall.config import DEFAULT
from memstream.core.recall.engine import Ask, recall
from memstream.core.unit_views import views_spec
from memstream.core.units import UNITS, units_spec
from memstream.streams.offline import InProcess

QUESTIONS = [
    "What did I say about {topic}?",
    "What happened with {topic} last week?",
    "How has my {topic} changed over the last months and why?",
    "When did I last talk about {topic}?",
    "What do I like?",
]


async def build(settings: Settings, units: int, users: int) -> tuple[EdgeShards, dict[str, Any]]:
    embedder = make_embedder(settings.embedding)
    shards = EdgeShards(
        settings.storage.data_dir / "store",
        [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)],
    )
    turns = list(islice(generate(users=users, days=365 * 3, tenant="bench"), units))
    last: dict[str, Any] = {}
    topics: dict[str, set[str]] = {}
    for t in turns:
        last[t.key] = max(last.get(t.key, t.ts), t.ts)
        topics.setdefault(t.key, set()).add(str(t.metadata.get("topic", "life")))
    t0 = time.perf_counter()
    await InProcess(settings, embedder, shards, batch_size=512).run(turns, _progress)
    print(file=sys.stderr)
    info = {
        "units": shards.get(0).count(UNITS),
        "memories": shards.get(0).count(MEMORIES),
        "build_s": round(time.perf_counter() - t0, 1),
        "last": last,
        "topics": {k: sorted(v) for k, v in topics.items()},
    }
    return shards, info


def _progress(stage: str, done: int, total: int) -> None:
    if done == total or done % 500 == 0:
        print(f"\r{stage} {done:,}/{total:,}   ", end="", file=sys.stderr, flush=True)


async def run(
    units: int, users: int, queries: int, embedder: str, budget: int, lexical: list[int]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memstream-bench-recall-") as tmp:
        settings = Settings(
            storage=StorageSettings(data_dir=Path(tmp)), embedding=EmbeddingSettings(embedder=embedder)
        )
        shards, info = await build(settings, units, users)
        model = make_embedder(settings.embedding)
        store = shards.get(0)
        rng = random.Random(7)
        keys = sorted(info["last"])
        latencies: dict[int, list[float]] = {n: [] for n in lexical}
        returned: dict[int, list[int]] = {n: [] for n in lexical}
        for q in range(queries):
            key = rng.choice(keys)
            question = rng.choice(QUESTIONS).format(topic=rng.choice(info["topics"][key]))
            now = info["last"][key]
            now = now if now.tzinfo else now.replace(tzinfo=UTC)
            first = q % len(lexical)  # each value goes first in turn
            for n in lexical[first:] + lexical[:first]:
                config = replace(DEFAULT, lexical_candidates=n)
                t0 = time.perf_counter()
                result = recall(store, model, Ask(key, question, now, budget_tokens=budget), config)
                latencies[n].append((time.perf_counter() - t0) * 1000)
                returned[n].append(len(result.items))
        shards.close()
    runs = [_summary(n, latencies[n], returned[n]) for n in lexical]
    return {
        "units": info["units"],
        "memories": info["memories"],
        "users": users,
        "embedder": embedder,
        "budget_tokens": budget,
        "queries": queries,
        **runs[0],
        "runs": runs,
        "build_s": info["build_s"],
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.python_implementation()} "
        f"{platform.python_version()}",
    }


def _summary(lexical: int, latencies: list[float], returned: list[int]) -> dict[str, Any]:
    qs = statistics.quantiles(latencies, n=100)
    return {
        "lexical_candidates": lexical,
        "p50_ms": round(statistics.median(latencies), 2),
        "p95_ms": round(qs[94], 2),
        "p99_ms": round(qs[98], 2),
        "items_median": statistics.median(returned),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--units", type=int, default=100_000)
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--budget", type=int, default=1000, help="budget_tokens per recall")
    p.add_argument("--embedder", choices=["hash", "minilm"], default="hash")
    p.add_argument(
        "--lexical",
        type=int,
        nargs="+",
        default=[DEFAULT.lexical_candidates],
        help="lexical (BM25) unit candidates per recall, 0 = dense only (default %(default)s); "
        "several values are timed alternately on one store",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    result = asyncio.run(run(args.units, args.users, args.queries, args.embedder, args.budget, args.lexical))
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        for r in result["runs"]:
            print(
                f"recall over {result['units']:,} units + {result['memories']:,} memories, "
                f"{r['lexical_candidates']} lexical candidates: "
                f"p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms, p99 {r['p99_ms']} ms"
            )


if __name__ == "__main__":
    main()

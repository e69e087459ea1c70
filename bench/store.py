"""Qdrant Edge store throughput: upsert rate, and latency of a user-filtered top-10 search.

    python bench/store.py [--points 100000] [--users 1000] [--dim 384] [--json]

Vectors are random unit vectors; every point belongs to one of ``--users`` users and every search is
restricted to one user, as the recurrence check and recall are. No ``optimize()`` is run, as in ingest.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from memstream.adapters.store.edge import EdgeStore
from memstream.core.store import CollectionSpec, Filter, Point, search


def run(points: int, users: int, dim: int, batch: int, queries: int, root: Path) -> dict[str, float]:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((points, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    spec = CollectionSpec(name="bench", dim=dim, keyword_fields=("user",), numeric_fields=("ts",))
    batches = [
        [
            Point(str(uuid.UUID(int=i + 1)), vectors[i], {"user": f"user-{i % users}", "ts": 1.7e9 + i})
            for i in range(start, min(start + batch, points))
        ]
        for start in range(0, points, batch)
    ]

    store = EdgeStore(root)
    try:
        store.ensure_collection(spec)
        started = time.perf_counter()
        for chunk in batches:
            store.upsert(spec.name, chunk)
        upsert_s = time.perf_counter() - started

        probes = rng.standard_normal((queries, dim)).astype(np.float32)
        who = rng.integers(users, size=queries)
        latencies = []
        for probe, user in zip(probes, who, strict=True):
            flt = Filter(equals={"user": f"user-{user}"})
            started = time.perf_counter()
            hits = search(store, spec.name, probe, 10, flt)
            latencies.append(time.perf_counter() - started)
            assert len(hits) == min(10, points // users)
    finally:
        store.close()

    measured = np.array(latencies[queries // 10 :]) * 1000  # the first tenth warms caches
    return {
        "points": points,
        "users": users,
        "upsert_points_per_s": round(points / upsert_s),
        "search_p50_ms": round(float(np.percentile(measured, 50)), 3),
        "search_p95_ms": round(float(np.percentile(measured, 95)), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--batch", type=int, default=256, help="points per upsert (the ingest batch size)")
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memstream-bench-") as tmp:
        result = run(args.points, args.users, args.dim, args.batch, args.queries, Path(tmp))
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['points']:,} points, {result['users']:,} users, dim {args.dim}: "
            f"upsert {result['upsert_points_per_s']:,.0f} points/s, user-filtered top-10 search "
            f"p50 {result['search_p50_ms']} ms, p95 {result['search_p95_ms']} ms"
        )


if __name__ == "__main__":
    main()

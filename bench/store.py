"""Qdrant Edge store throughput and memory: upsert rate, latency of a user-filtered top-10 search,
and the heap each point takes.

    python bench/store.py [--points 100000] [--users 1000] [--dim 384] [--collection plain] [--json]

Vectors are random unit vectors; every point belongs to one of ``--users`` users and every search is
restricted to one user, as the recurrence check and recall are. No ``optimize()`` is run, as in ingest:
every point stays in Edge's appendable segments, whose id tracker, payload indexes and sparse index
are held in RAM. ``anon_bytes_per_point`` is this process's RssAnon growth over the upserts ÷ points
(the vectors and payloads are memory-mapped files, counted apart as ``file_bytes_per_point``).

``--collection``: ``plain`` (a keyword and a numeric index, no sparse vector), or the layout of one of
memstream's collections, built by its own code from generated turns: ``units`` (its payload, five
payload indexes and the BM25 sparse vector) or ``unit_views`` (a user and a tenant index).
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt

from memstream.adapters.store.edge import EdgeStore
from memstream.core.lexical import encode_document
from memstream.core.store import CollectionSpec, Filter, Point, search
from memstream.core.unit_views import view_point, views_spec
from memstream.core.units import USER_FIELD, build_unit, unit_payload, units_spec
from memstream.schemas.events import Message, Turn


def points_of(
    collection: str, vectors: npt.NDArray[np.float32], users: int
) -> tuple[CollectionSpec, list[Point]]:
    """The collection's spec and one point per vector, the ``i``-th of user ``user-<i % users>``."""
    n, dim = vectors.shape
    if collection == "plain":
        spec = CollectionSpec(name="bench", dim=dim, keyword_fields=(USER_FIELD,), numeric_fields=("ts",))
        return spec, [
            Point(str(uuid.UUID(int=i + 1)), vectors[i], {USER_FIELD: f"user-{i % users}", "ts": 1.7e9 + i})
            for i in range(n)
        ]
    units = [build_unit(turn, ZoneInfo("UTC"), lambda text, when: []) for turn in turns(n, users)]
    if collection == "units":
        spec = units_spec(dim)
        return spec, [
            Point(u.unit_id, vectors[i], unit_payload(u), encode_document(u.text))
            for i, u in enumerate(units)
        ]
    # One view point a unit, as a one-sentence unit's: its vector as its context and its one sentence.
    return views_spec(dim), [view_point(u, vectors[i : i + 1], vectors[i]) for i, u in enumerate(units)]


def turns(n: int, users: int) -> list[Turn]:
    """``n`` turns of a user's note and the assistant's reply, spread over ``users`` users. (bench.scale's
    generator, in this script's own shape: run as ``python bench/store.py``, ``bench`` is not importable.)"""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        Turn(
            tenant="bench",
            user_id=f"user-{i % users}",
            session_id=f"s{i // users}",
            turn_id=f"t{i}",
            ts=start + timedelta(minutes=i),
            messages=[
                Message(speaker="user", content=f"Note {i}: I walked {i % 97} minutes by the river today."),
                Message(speaker="assistant", role="assistant", content="Good to hear. Same time tomorrow?"),
            ],
        )
        for i in range(n)
    ]


def rss_kib() -> tuple[int, int]:
    """(RssAnon, RssFile) of this process in KiB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["RssAnon"].split()[0]), int(fields["RssFile"].split()[0])


def run(
    points: int, users: int, dim: int, batch: int, queries: int, root: Path, collection: str
) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((points, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    spec, made = points_of(collection, vectors, users)
    batches = [made[start : start + batch] for start in range(0, points, batch)]
    user_of = [str(p.payload[USER_FIELD]) for p in made[:users]]

    store = EdgeStore(root)
    try:
        store.ensure_collection(spec)
        gc.collect()
        anon0, file0 = rss_kib()
        started = time.perf_counter()
        for chunk in batches:
            store.upsert(spec.name, chunk)
        upsert_s = time.perf_counter() - started
        gc.collect()
        anon1, file1 = rss_kib()  # the points made are still held: the growth is the store's

        probes = rng.standard_normal((queries, dim)).astype(np.float32)
        who = rng.integers(users, size=queries)
        latencies = []
        for probe, user in zip(probes, who, strict=True):
            flt = Filter(equals={USER_FIELD: user_of[user]})
            started = time.perf_counter()
            hits = search(store, spec.name, probe, 10, flt, with_payload=False)
            latencies.append(time.perf_counter() - started)
            assert len(hits) == min(10, points // users)
    finally:
        store.close()

    measured = np.array(latencies[queries // 10 :]) * 1000  # the first tenth warms caches
    return {
        "collection": collection,
        "points": points,
        "users": users,
        "upsert_points_per_s": round(points / upsert_s),
        "search_p50_ms": round(float(np.percentile(measured, 50)), 3),
        "search_p95_ms": round(float(np.percentile(measured, 95)), 3),
        "anon_bytes_per_point": round((anon1 - anon0) * 1024 / points),
        "file_bytes_per_point": round((file1 - file0) * 1024 / points),
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
    parser.add_argument(
        "--collection", choices=("plain", "units", "unit_views"), default="plain", help="the points' layout"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memstream-bench-") as tmp:
        result = run(args.points, args.users, args.dim, args.batch, args.queries, Path(tmp), args.collection)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['points']:,} points, {result['users']:,} users, dim {args.dim}: "
            f"upsert {result['upsert_points_per_s']:,.0f} points/s, user-filtered top-10 search "
            f"p50 {result['search_p50_ms']} ms, p95 {result['search_p95_ms']} ms; "
            f"{result['anon_bytes_per_point']:,} heap bytes a point ({args.collection})"
        )


if __name__ == "__main__":
    main()

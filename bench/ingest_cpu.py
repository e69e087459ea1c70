"""The ingest processor's CPU per turn, and a digest of everything it stored: for comparing two versions
of the hot path on a shared machine, where wall-clock turns/s moves with the neighbours' load.

    python -m bench.ingest_cpu [--turns N] [--json]

The processor alone (as bench/ingest.py's processor-only figure: no broker, no faust), hash embedder,
``--turns`` generated turns (200 users) in batches of ``MEMSTREAM_BATCH_SIZE``, a fixed wall clock.
``cpu_us_per_turn`` is ``time.process_time()`` over the run (every thread: the embedder's too) per turn.
``digest`` hashes every stored unit and view point (id, payload, vectors) and every batch's results (requests,
closed windows, window state): two versions that store the same things print the same digest.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from memstream.adapters.embedders import make_embedder
from memstream.adapters.settings import EmbeddingSettings, Settings, StorageSettings
from memstream.adapters.store import open_shards, scroll_all
from memstream.apps.sample_conversations import generate
from memstream.core.store import VectorStore
from memstream.core.unit_views import UNIT_VIEWS, views_spec
from memstream.core.units import UNITS, units_spec
from memstream.streams.ingest import BatchResult, Incoming, IngestProcessor

CLOCK = 1_800_000_000.0  # a fixed wall clock, so window states and dead letters repeat


def run(turns: int, data_dir: Path) -> dict[str, Any]:
    settings = Settings(
        embedding=EmbeddingSettings(embedder="hash"), storage=StorageSettings(data_dir=data_dir)
    )
    embedder = make_embedder(settings.embedding)
    shards = open_shards(settings.storage, [units_spec(embedder.dim), views_spec(embedder.dim)])
    store = shards.get(0)  # opened before the timing; hand-built records carry no partition
    processor = IngestProcessor(settings, embedder, shards, clock=lambda: CLOCK)
    sample = islice(generate(users=200, days=365, tenant="bench"), turns)
    records = [Incoming(t.to_bytes(), t.key, "turns") for t in sample]
    state: dict[bytes, Any] = {}
    results: list[BatchResult] = []

    async def feed() -> None:
        for i in range(0, len(records), settings.worker.batch_size):
            results.append(await processor.process(records[i : i + settings.worker.batch_size], state))
            state.update(results[-1].window_state)

    cpu = time.process_time()
    asyncio.run(feed())
    cpu = time.process_time() - cpu
    digest = hashlib.sha256()
    counts = {name: _digest_collection(store, name, digest) for name in (UNITS, UNIT_VIEWS)}
    for r in results:
        digest.update(_result_bytes(r))
    shards.close()
    return {
        "turns": len(records),
        "cpu_us_per_turn": round(1e6 * cpu / len(records), 1),
        "units": counts[UNITS],
        "views": counts[UNIT_VIEWS],
        "digest": digest.hexdigest()[:16],
    }


def _digest_collection(store: VectorStore, name: str, digest: Any) -> int:
    hits = sorted(scroll_all(store, name), key=lambda h: h.id)
    vectors = {h.id: h for h in store.retrieve(name, [h.id for h in hits], with_vectors=True)}
    for h in hits:
        digest.update(orjson.dumps([h.id, h.payload], option=orjson.OPT_SORT_KEYS))
        digest.update(np.asarray(vectors[h.id].vector, dtype=np.float32).tobytes())
        if vectors[h.id].multi is not None:
            digest.update(np.asarray(vectors[h.id].multi, dtype=np.float32).tobytes())
    return len(hits)


def _result_bytes(r: BatchResult) -> bytes:
    return orjson.dumps(
        [
            r.duplicates,
            [c.to_bytes().decode() for c in r.consolidation],
            [w.to_bytes().decode() for w in r.windows],
            {key.decode(): value for key, value in r.window_state.items()},
        ],
        option=orjson.OPT_SORT_KEYS,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=4000)
    p.add_argument("--json", action="store_true", help="print one JSON object (default: a readable line)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="memstream-ingest-cpu-") as work:
        result = run(args.turns, Path(work))
    if args.json:
        print(orjson.dumps(result).decode())
    else:
        print(
            f"{result['cpu_us_per_turn']:.1f} us CPU a turn over {result['turns']} turns; stored "
            f"{result['units']} units, {result['views']} views; digest {result['digest']}"
        )


if __name__ == "__main__":
    main()

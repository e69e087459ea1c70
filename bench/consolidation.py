"""Consolidation cost on LoCoMo: LLM calls against an eager per-exchange extractor; and
consolidation at volume: many users, a real answer latency, a concurrency bound.

    python bench/consolidation.py [--data PATH] [--embedder minilm|hash] --json
    python bench/consolidation.py --llm-latency 1 --users 100 --concurrency 16 [--set locomo|sample] --json

Starts a Tansu broker, the OpenAI-compatible test server (memstream/testing/openai_server.py, answering
memstream's prompts with valid JSON built from their data: memstream/testing/chat_responder.py) and
``memstream up`` with its LLM pointed at that server, so every consolidation call is a real HTTP
request with ``usage``. Replays the dataset, waits until every topic is consumed and every
session window has closed (the last ones by idleness), then stops and counts: LLM calls and tokens (from the
server, cross-checked against the pipeline's counters), memories by kind, and units. The eager
baseline is one LLM call per exchange (unit), as per-message extractors make.

Without --users, the dataset is replayed as it is. With --users N, a many-user set is replayed
instead (bench/users.py): the users of the dev split (--set locomo) or of the sample set that
``memstream sample`` writes (--set sample), renamed and copied until there are N, each cut to its
first --turns-per-user turns, interleaved turn by turn. --llm-latency S delays every chat answer
of the test server by S seconds (``chat_delay_s``); --concurrency C sets the worker's
``MEMSTREAM_LLM_CONCURRENCY`` (LLM calls in flight per worker).

Clocks (seconds, ``time.monotonic``; 0 is the start of the replay, once the worker owns every
partition):

* ``ingest_s``: until every turn is processed (the turns topic committed past the last one);
* ``consolidation_wall_s``: from then until consolidation settled (every session window closed:
  as many closes as the set has sessions, and no sooner than the idle close, 3 s, plus one check
  interval after ingest; then every topic after ingest committed twice in a row, polled every
  0.5 s: bench/phases.py); ``replay_to_settled_s`` (= ``elapsed_s``): from the start of the replay
  until settled;
* ``llm_span_s``: from the first chat request the test server received to the end of the last one
  it served (server side). Consolidation starts while turns are still being ingested, and
  settling adds the idle close and the polling after the last answer, so this is the LLM phase
  itself; ``llm_first_request_s`` and ``llm_last_answer_s`` place it on the replay's clock.

From the server's side too: ``llm_calls`` (answered chat requests), ``max_in_flight`` and
``mean_in_flight`` (chat requests in flight, time-weighted over ``llm_span_s``).

``volume_ratio`` = ``llm_span_s`` ÷ (``llm_calls`` × ``llm_latency_s`` ÷ ``concurrency``): the
LLM phase against the time the calls would take if exactly ``concurrency`` were always in flight
(1.0 is ideal; it grows as fewer run at once). ``volume_ratio_after_ingest`` uses
``consolidation_wall_s`` instead. Both are null at zero latency.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from memstream.adapters.broker import Broker, free_port
from memstream.adapters.embedders import make_embedder
from memstream.adapters.store import all_stores, open_shards, scroll_all
from memstream.apps.cost import cost_report
from memstream.apps.datasets import RawRecord
from memstream.apps.status import fetch_status
from memstream.core.memories import MEMORIES, memories_spec, memory_from_payload
from memstream.core.unit_views import views_spec
from memstream.core.units import UNITS, units_spec

# The repository root, for bench/users.py when run as `python bench/consolidation.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.harness import start_up, stop
from bench.phases import WORKER_ENV, replay_until_settled
from bench.users import Source, many_users, source_records
from memstream.testing.chat_responder import respond
from memstream.testing.openai_server import OpenAIServer

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"
TREE = ("session", "day", "week", "profile")
TURNS_PER_USER = 40


def run(
    records: list[RawRecord],
    data: str,
    embedder: str,
    llm_latency: float = 0.0,
    concurrency: int | None = None,
    max_seconds: float = 1800.0,
) -> dict[str, Any]:
    """Replay ``records`` (described as ``data`` in the report) through one worker whose LLM is the
    test server answering after ``llm_latency`` s, with ``concurrency`` as its LLM concurrency
    (None: the default); the figures of the module's docstring."""
    work = Path(tempfile.mkdtemp(prefix="memstream-bench-consolidation-"))
    users = len({r.key for r in records})
    with OpenAIServer() as server, Broker(free_port(), work / "tansu.log") as broker:
        server.chat_responder = respond
        server.chat_delay_s = llm_latency
        env = {
            **WORKER_ENV,
            "MEMSTREAM_EMBEDDER": embedder,
            "MEMSTREAM_LLM_BASE_URL": server.base_url,
            "MEMSTREAM_LLM_MODEL": "bench-model",
            **({"MEMSTREAM_LLM_CONCURRENCY": str(concurrency)} if concurrency is not None else {}),
        }
        settings, proc, log = start_up(broker, work, **env)
        try:
            phases = replay_until_settled(settings, records, proc, log, time.monotonic() + max_seconds)
            cost = cost_report(fetch_status(settings))
        finally:
            stop(proc)
        served = dict(server.usage_totals)
        first, last = server.first_chat_at, server.last_chat_end_at
        llm_span, mean_in_flight = server.chat_span_s, server.mean_in_flight
        max_in_flight = server.max_in_flight

    dim = make_embedder(settings.embedding).dim
    shards = open_shards(settings.storage, [units_spec(dim), views_spec(dim), memories_spec(dim)])
    stores = all_stores(shards, settings.kafka.topic_partitions)
    kinds = Counter(
        memory_from_payload(h.payload).kind.value for s in stores for h in scroll_all(s, MEMORIES)
    )
    units = sum(s.count(UNITS) for s in stores)
    shards.close()
    bound = settings.llm.llm_concurrency
    ideal = served["calls"] * llm_latency / bound  # the LLM phase if `bound` calls were always in flight
    t0, ingested, done = phases.started, phases.ingested, phases.settled
    consolidation_wall = done - ingested
    return {
        "data": data,
        "embedder": embedder,
        "users": users,
        "llm_latency_s": llm_latency,
        "concurrency": bound,
        "llm_calls": served["calls"],
        "max_in_flight": max_in_flight,
        "mean_in_flight": round(mean_in_flight, 2),
        "ingest_s": round(ingested - t0, 1),
        "consolidation_wall_s": round(consolidation_wall, 1),
        "replay_to_settled_s": round(done - t0, 1),
        "llm_span_s": round(llm_span, 1),
        "llm_first_request_s": round(first - t0, 1) if first is not None else None,
        "llm_last_answer_s": round(last - t0, 1) if last is not None else None,
        "ideal_llm_s": round(ideal, 1),
        "volume_ratio": round(llm_span / ideal, 2) if ideal else None,
        "volume_ratio_after_ingest": round(consolidation_wall / ideal, 2) if ideal else None,
        "eager_calls": units,
        "call_ratio": round(served["calls"] / units, 4),
        "prompt_tokens": served["prompt_tokens"],
        "completion_tokens": served["completion_tokens"],
        "pipeline_counted": {k: cost[k] for k in ("llm_calls", "prompt_tokens", "completion_tokens")},
        "by_stage": cost["by_stage"],
        "per_1000_turns": cost["per_1000_turns"],
        "episodes": kinds.get("episode", 0),
        "facts": kinds.get("fact", 0),
        "tree_nodes": sum(kinds.get(k, 0) for k in TREE),
        "memories_by_kind": dict(sorted(kinds.items())),
        "units": units,
        "turns": len(records),
        "elapsed_s": round(done - t0, 1),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.python_implementation()} "
        f"{platform.python_version()}",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=LOCOMO, help="LoCoMo-format JSON (default: the dev split)")
    p.add_argument("--embedder", choices=["minilm", "hash"], default="minilm")
    p.add_argument(
        "--llm-latency", type=float, default=0.0, help="seconds the test server waits before each chat answer"
    )
    p.add_argument(
        "--users",
        type=int,
        default=None,
        help="replay a many-user set of this many users (renamed copies of --set's users), "
        "not --data as it is",
    )
    p.add_argument(
        "--set",
        choices=["locomo", "sample"],
        default="locomo",
        help="with --users: copy the users of --data (locomo) or of the sample set `memstream sample` writes",
    )
    p.add_argument(
        "--turns-per-user",
        type=int,
        default=TURNS_PER_USER,
        help=f"with --users: each copy replays only its source user's first this many turns, in order "
        f"(default {TURNS_PER_USER}: 100 users at 1 s latency stay within minutes; 0: all)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="MEMSTREAM_LLM_CONCURRENCY of the worker (default: its own)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    if args.llm_latency < 0 or (args.users is not None and args.users < 1) or args.turns_per_user < 0:
        p.error("--llm-latency and --turns-per-user must not be negative, --users must be positive")
    if args.concurrency is not None and args.concurrency < 1:
        p.error("--concurrency must be positive")
    if args.set == "locomo" and not args.data.exists():
        raise SystemExit(f"no data at {args.data}")
    source: Source = args.set
    if args.users is None:
        records = source_records(source, args.data)
        data = str(args.data) if source == "locomo" else "sample"
    else:
        cap = args.turns_per_user or None
        records = many_users(source_records(source, args.data), args.users, cap)
        origin = args.data if source == "locomo" else "sample"
        data = f"{origin} as {args.users} users, first {cap or 'all'} turns each"
    result = run(records, data, args.embedder, args.llm_latency, args.concurrency)
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        print(
            f"{result['llm_calls']} LLM calls vs {result['eager_calls']} eager: "
            f"ratio {result['call_ratio']:.3f}; "
            f"{result['episodes']} episodes, {result['facts']} facts, {result['tree_nodes']} tree nodes\n"
            f"{result['users']} users, latency {result['llm_latency_s']} s, "
            f"concurrency {result['concurrency']}: "
            f"in flight max {result['max_in_flight']}, mean {result['mean_in_flight']}; "
            f"LLM phase {result['llm_span_s']} s, settled {result['consolidation_wall_s']} s after ingest "
            f"({result['ingest_s']} s); volume ratio {result['volume_ratio']}"
        )


if __name__ == "__main__":
    main()

"""How long consolidation runs behind ingest: the settle time after every turn is processed.

    python -m bench.settle [--users 20] [--set sample|locomo] [--turns-per-user N]
                           [--llm-latency S [--concurrency C]] [--embedder minilm|hash] [--json]

Starts its own Tansu broker and one `memstream up` (one worker, every role), replays a many-user
set (bench/users.py: the sample set that ``memstream sample`` writes, or the dev split, renamed
and copied until --users users, interleaved turn by turn) and measures, on one clock:

* ``ingest_s``: from the start of the replay (once the worker owns every partition) until every
  turn is processed (the turns topic
  committed past the last one);
* ``settle_after_ingest_s``: from then until consolidation settled: every session window closed
  (as many session closes counted as the set has sessions, and at least the idle close time plus
  one check interval after ingest: the last session of each user closes by idleness, after
  ``MEMSTREAM_IDLE_CLOSE_S``, 3 s here so that the wait measures work, not a timer), then every
  topic after ingest committed twice in a row
  (``memstream.adapters.kafka.settled``), polled every 0.5 s;
* ``settle_ratio`` = ``settle_after_ingest_s`` ÷ ``ingest_s``.

Without --llm-latency the worker has no LLM (the extractive path). With it, its LLM is the
OpenAI-compatible test server (memstream/testing/openai_server.py) answering memstream's prompts
after that many seconds, and the report adds the server's ``llm_calls``, ``max_in_flight`` and
``mean_in_flight``; --concurrency sets ``MEMSTREAM_LLM_CONCURRENCY``.

A separate bench rather than a flag of bench/soak.py: the soak produces a generated backlog and
samples memory while one worker drains it; this one replays whole conversations of many users and
needs their windows to close, and on the LLM path the test server, to say when consolidation is done.
Every wait is bounded by --max-seconds; `memstream up` and the broker are stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench.harness import start_up, stop
from bench.phases import WORKER_ENV, replay_until_settled
from bench.users import Source, many_users, source_records
from memstream.adapters.broker import Broker, free_port
from memstream.apps.datasets import RawRecord
from memstream.testing.chat_responder import respond
from memstream.testing.openai_server import OpenAIServer

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"


def run(
    records: list[RawRecord],
    embedder: str = "minilm",
    llm_latency: float | None = None,
    concurrency: int | None = None,
    max_seconds: float = 1800.0,
) -> dict[str, Any]:
    """Replay ``records`` through one worker, extractive (``llm_latency`` None) or with the test
    server as its LLM; the figures of the module's docstring."""
    users = len({r.key for r in records})
    work = Path(tempfile.mkdtemp(prefix="memstream-settle-"))
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(OpenAIServer()) if llm_latency is not None else None
        env = {**WORKER_ENV, "MEMSTREAM_EMBEDDER": embedder}
        if server is not None:
            server.chat_responder = respond
            server.chat_delay_s = llm_latency or 0.0
            env |= {"MEMSTREAM_LLM_BASE_URL": server.base_url, "MEMSTREAM_LLM_MODEL": "bench-model"}
            if concurrency is not None:
                env["MEMSTREAM_LLM_CONCURRENCY"] = str(concurrency)
        broker = stack.enter_context(Broker(free_port(), work / "tansu.log"))
        settings, proc, log = start_up(broker, work, **env)
        try:
            phases = replay_until_settled(settings, records, proc, log, time.monotonic() + max_seconds)
        finally:
            stop(proc)
    shutil.rmtree(work, ignore_errors=True)
    ingest, settle = phases.ingested - phases.started, phases.settled - phases.ingested
    result: dict[str, Any] = {
        "path": "extractive" if server is None else "llm",
        "users": users,
        "turns": len(records),
        "embedder": embedder,
        "ingest_s": round(ingest, 1),
        "settle_after_ingest_s": round(settle, 1),
        "settle_ratio": round(settle / ingest, 2),
        "windows_closed_after_ingest_s": round(phases.windows_closed - phases.ingested, 1),
    }
    if server is not None:
        result |= {
            "llm_latency_s": llm_latency,
            "concurrency": settings.llm.llm_concurrency,
            "llm_calls": server.usage_totals["calls"],
            "max_in_flight": server.max_in_flight,
            "mean_in_flight": round(server.mean_in_flight, 2),
        }
    return result | {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.python_implementation()} "
        f"{platform.python_version()}",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=20, help="users in the replayed set (default 20)")
    p.add_argument(
        "--set",
        choices=["sample", "locomo"],
        default="sample",
        help="copy the users of the sample set (default) or of --data",
    )
    p.add_argument("--data", type=Path, default=LOCOMO, help="LoCoMo-format JSON for --set locomo")
    p.add_argument(
        "--turns-per-user", type=int, default=0, help="replay only each user's first this many turns (0: all)"
    )
    p.add_argument(
        "--llm-latency",
        type=float,
        default=None,
        help="take the LLM path: the test server answers after this many seconds (default: extractive)",
    )
    p.add_argument("--concurrency", type=int, default=None, help="MEMSTREAM_LLM_CONCURRENCY (LLM path)")
    p.add_argument("--embedder", choices=["minilm", "hash"], default="minilm")
    p.add_argument("--max-seconds", type=float, default=1800.0, help="bound on every wait (default 1800)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    if args.users < 1 or args.turns_per_user < 0 or args.max_seconds <= 0:
        p.error("--users and --max-seconds must be positive, --turns-per-user not negative")
    if (args.llm_latency is not None and args.llm_latency < 0) or (
        args.concurrency is not None and args.concurrency < 1
    ):
        p.error("--llm-latency must not be negative, --concurrency must be positive")
    if args.set == "locomo" and not args.data.exists():
        raise SystemExit(f"no data at {args.data}")
    # SIGTERM (a `timeout`, a CI runner) unwinds like Ctrl-C, so the pipeline and broker are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    source: Source = args.set
    records = many_users(source_records(source, args.data), args.users, args.turns_per_user or None)
    result = run(records, args.embedder, args.llm_latency, args.concurrency, args.max_seconds)
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        print(
            f"{result['path']}: {result['turns']} turns of {result['users']} users ingested in "
            f"{result['ingest_s']} s; consolidation settled {result['settle_after_ingest_s']} s later "
            f"(ratio {result['settle_ratio']})"
        )


if __name__ == "__main__":
    main()

"""Consolidation cost on LoCoMo: LLM calls against an eager per-exchange extractor.

    python bench/consolidation.py [--data PATH] [--embedder minilm|hash] --json

Starts a Tansu broker, the OpenAI-compatible test server (memstream/testing/openai_server.py, answering
memstream's prompts with valid JSON built from their data: memstream/testing/chat_responder.py) and
``memstream up`` with its LLM pointed at that server, so every consolidation call is a real HTTP
request with ``usage``. Replays the dataset, waits until every topic is consumed and every
user's windows have closed by idleness, then stops and counts: LLM calls and tokens (from the
server, cross-checked against the pipeline's counters), memories by kind, and units. The eager
baseline is one LLM call per exchange (unit), as per-message extractors make.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import subprocess
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
from memstream.adapters.kafka import settled
from memstream.adapters.settings import Settings
from memstream.adapters.store import all_stores, open_shards, scroll_all
from memstream.apps.cost import cost_report
from memstream.apps.datasets import read_records
from memstream.apps.replay import replay
from memstream.apps.status import fetch_status
from memstream.core.memories import MEMORIES, memories_spec, memory_from_payload
from memstream.core.units import UNITS, units_spec

# The test server and its prompt responder live with the tests (a test double, not product code).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from memstream.testing.chat_responder import respond
from memstream.testing.openai_server import OpenAIServer

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"
TREE = ("session", "day", "week", "profile")


def wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1.0)
    raise SystemExit(f"timed out waiting for {what}")


def run(data: Path, embedder: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="memstream-bench-consolidation-"))
    records = list(read_records(data, "locomo"))
    users = len({r.key for r in records})
    with OpenAIServer() as server, Broker(free_port(), work / "tansu.log") as broker:
        server.chat_responder = respond
        env = {
            **os.environ,
            "MEMSTREAM_BOOTSTRAP_SERVERS": broker.bootstrap,
            "MEMSTREAM_TANSU_QUIRKS": "true",
            "MEMSTREAM_DATA_DIR": str(work / "data"),
            "MEMSTREAM_EMBEDDER": embedder,
            "MEMSTREAM_METRICS_PORT": str(free_port()),
            "MEMSTREAM_GATEWAY_PORT": "0",
            "MEMSTREAM_LLM_BASE_URL": server.base_url,
            "MEMSTREAM_LLM_MODEL": "bench-model",
            "MEMSTREAM_IDLE_CLOSE_S": "3",
            "MEMSTREAM_IDLE_CHECK_INTERVAL_S": "1",
            "MEMSTREAM_DURATIVE_DELAY_S": "2",
            "MEMSTREAM_LOG_LEVEL": "WARNING",
        }
        settings = Settings.from_env(env)
        proc = subprocess.Popen(
            [sys.executable, "-m", "memstream.apps.cli", "up"],
            env=env,
            stdout=(work / "worker.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        try:
            t0 = time.perf_counter()
            report = asyncio.run(replay(settings, records, wait=True, wait_timeout=900, progress=False))
            if not report.processed:
                raise SystemExit(f"the pipeline did not ingest the data; see {work / 'worker.log'}")

            def idle_closed() -> bool:
                closed = fetch_status(settings).get("memstream_windows_closed", {})
                return bool(closed.get("session/idle", 0) >= users)

            wait(idle_closed, 300, "idle windows")
            wait(lambda: asyncio.run(settled(settings)), 900, "consolidation to finish")
            elapsed = time.perf_counter() - t0
            cost = cost_report(fetch_status(settings))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        served = dict(server.usage_totals)

    dim = make_embedder(settings).dim
    shards = open_shards(settings, [units_spec(dim), memories_spec(dim)])
    stores = all_stores(shards, settings.topic_partitions)
    kinds = Counter(
        memory_from_payload(h.payload).kind.value for s in stores for h in scroll_all(s, MEMORIES)
    )
    units = sum(s.count(UNITS) for s in stores)
    shards.close()
    return {
        "data": str(data),
        "embedder": embedder,
        "llm_calls": served["calls"],
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
        "elapsed_s": round(elapsed, 1),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.python_implementation()} "
        f"{platform.python_version()}",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=LOCOMO, help="LoCoMo-format JSON (default: the dev split)")
    p.add_argument("--embedder", choices=["minilm", "hash"], default="minilm")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    if not args.data.exists():
        raise SystemExit(f"no data at {args.data}")
    result = run(args.data, args.embedder)
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        print(
            f"{result['llm_calls']} LLM calls vs {result['eager_calls']} eager: "
            f"ratio {result['call_ratio']:.3f}; "
            f"{result['episodes']} episodes, {result['facts']} facts, {result['tree_nodes']} tree nodes"
        )


if __name__ == "__main__":
    main()

"""``memstream demo``: the whole pipeline on one machine, on a bundled conversation set.

Starts ``memstream up`` (embedded Tansu broker, Qdrant Edge, the configured embedder) in a
child process, replays the sample set, waits until every turn is processed and the idle
windows have closed, prints what happened, and stops everything.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from memstream.adapters.broker import free_port, free_ports, port_open
from memstream.adapters.embedded_broker import broker_kind, describe
from memstream.adapters.settings import Settings
from memstream.apps.datasets import read_records
from memstream.apps.replay import replay
from memstream.apps.status import fetch_status, render_status, settled
from memstream.schemas.events import Turn

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample.jsonl"
DEMO_KEY = "demo-key-not-for-production"
PROGRESS_EVERY_S = 15.0  # how often a wait says it still waits, where no line can be rewritten


def run_demo(settings: Settings, sample: Path, idle_close_s: float = 5.0) -> int:
    # httpx logs each request at INFO: between the results, that is noise.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    data_dir = settings.storage.data_dir / "demo"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    broker_port = (
        settings.kafka.embedded_broker_port
        if not port_open(settings.kafka.embedded_broker_port)
        else free_port()
    )
    metrics_port, gateway_port = free_ports(settings.worker.workers), free_port()
    records = list(read_records(sample, "jsonl"))
    first = Turn.from_bytes(records[0].value)
    env = {
        **os.environ,
        "MEMSTREAM_DATA_DIR": str(data_dir),
        "MEMSTREAM_EMBEDDED_BROKER_PORT": str(broker_port),
        "MEMSTREAM_METRICS_PORT": str(metrics_port),
        "MEMSTREAM_GATEWAY_PORT": str(gateway_port),
        "MEMSTREAM_API_KEYS": json.dumps({DEMO_KEY: first.tenant}),
        "MEMSTREAM_IDLE_CLOSE_S": str(idle_close_s),
        "MEMSTREAM_IDLE_CHECK_INTERVAL_S": "1",
        "MEMSTREAM_DURATIVE_DELAY_S": "2",
        "MEMSTREAM_LOG_LEVEL": "WARNING",
    }
    env.pop("MEMSTREAM_BOOTSTRAP_SERVERS", None)
    client = settings.replace(
        bootstrap_servers=f"127.0.0.1:{broker_port}",
        metrics_port=metrics_port,
        tansu_quirks=broker_kind(settings) == "tansu",
    )
    log = data_dir / "pipeline.log"
    print(
        f"starting the pipeline: embedded broker on 127.0.0.1:{broker_port}, "
        f"{describe(client.replace(data_dir=data_dir))}, store in {data_dir}, "
        f"embedder {settings.embedding.embedder} (log: {log})",
        flush=True,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "memstream.apps.cli", "up"],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        _wait(lambda: _status(client) is not None, 120, "the pipeline to start", proc, log)
        print(f"replaying {len(records)} turns from {sample}", flush=True)
        report = asyncio.run(
            replay(
                client, records, total=len(records), wait=True, wait_timeout=900, progress=sys.stderr.isatty()
            )
        )
        print(
            f"produced at {report.rate:,.0f} turns/s; processed {report.produced} turns "
            f"{report.seconds + report.wait_seconds:.1f}s after the first was sent",
            flush=True,
        )
        print(f"waiting {idle_close_s:.0f}s of quiet for the open windows to close ...", flush=True)
        users = len({r.key for r in records})
        _wait(lambda: _idle_sessions(client) >= users, 120, "idle windows to close", proc, log)
        _wait(lambda: asyncio.run(settled(client)), 300, "consolidation to finish", proc, log)
        status = _status(client)
        assert status is not None
        print()
        print(render_status(status))
        print(
            "\nEvery exchange was embedded and stored raw. Only recurring topics (consolidation requests) "
            "and closed windows were consolidated: into episodes and facts, and session/day/week/profile "
            "nodes of the memory tree"
            + (
                " by the extractive consolidator (no LLM configured: 0 tokens)."
                if not settings.llm.llm_base_url
                else f" by {settings.llm.llm_model}; `memstream cost` shows the tokens."
            )
        )
        last = max(
            t.ts for t in map(Turn.from_bytes, (r.value for r in records)) if t.user_id == first.user_id
        )
        _ask(f"http://127.0.0.1:{gateway_port}", first.user_id, last)
        _consolidated(f"http://127.0.0.1:{gateway_port}", first.user_id)
        return 0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


# What an agent would ask at the end of the sample: an episode (the move as it went), a fact and
# the one it superseded (a question about change keeps superseded facts, marked so), and a question
# scoped to a time.
QUESTIONS = (
    "How did my move go over the last few weeks?",
    "Where did I live before, and where do I live now?",
    "What did I do last weekend?",
)


def _ask(gateway: str, user_id: str, now: datetime) -> None:
    """Recalls through the query gateway, as an agent would ask them; each item with its kind, its
    dates and whether it is current (a superseded fact is marked so)."""
    headers = {"Authorization": f"Bearer {DEMO_KEY}"}
    asked_at = now.replace(tzinfo=now.tzinfo or UTC).isoformat()
    for query in QUESTIONS:
        body = {"user_id": user_id, "query": query, "now": asked_at, "budget_tokens": 400}
        answer = httpx.post(f"{gateway}/v1/recall", json=body, headers=headers, timeout=60).json()
        print(f"\nPOST /v1/recall  {user_id} at {asked_at[:16]}: {query!r}  ({answer['tokens']} tokens)")
        for item in answer["items"]:
            mark = "" if item["current"] else " SUPERSEDED"
            when = (item.get("event_start") or item.get("dialogue_time") or "")[:10]
            print(f"  [{item['kind']}{mark} {when}] {' '.join(item['text'].split())[:150]}")
    # Where the user lives, as facts: the agent tool an agent calls for "where did I live before?",
    # superseded facts included; the old city's fact is marked SUPERSEDED by the move.
    args = {"predicate": "lives in", "include_superseded": True, "order_by": "start"}
    body = {"user_id": user_id, "arguments": args}
    facts = httpx.post(
        f"{gateway}/v1/tools/find_entity_contexts", json=body, headers=headers, timeout=60
    ).json()
    print(f"\nPOST /v1/tools/find_entity_contexts  {user_id}: {json.dumps(args)}  ({facts['total']} facts)")
    for item in facts["items"]:
        mark = "" if item["current"] else " SUPERSEDED"
        triple = " | ".join(str(v) for v in (item["triple"] or {}).values())
        print(f"  [fact{mark} {item['start'][:10]}] {triple}")


OBSERVATIONS_SHOWN = 5


def _consolidated(gateway: str, user_id: str) -> None:
    """What consolidation wrote for the user, from the timeline: a few observations (level 1) and the
    latest session node, who did what."""
    headers = {"Authorization": f"Bearer {DEMO_KEY}"}
    url = f"{gateway}/v1/users/{user_id}/timeline"
    nodes = httpx.get(url, params={"min_level": 1}, headers=headers, timeout=60).json()["nodes"]
    observed = [n for n in nodes if n["kind"] == "observation"]
    print(f"\nGET /v1/users/{user_id}/timeline?min_level=1  ({len(observed)} observations, e.g.)")
    for n in observed[:OBSERVATIONS_SHOWN]:
        print(f"  [observation {(n['start'] or '')[:10]}] {' '.join(n['text'].split())[:150]}")
    sessions = [n for n in nodes if n["kind"] == "session"]
    if sessions:
        print("\nthe latest session node:")
        for line in sessions[-1]["text"].split("\n"):
            print(f"  {line[:150]}")


def _status(settings: Settings) -> dict[str, Any] | None:
    try:
        return fetch_status(settings, timeout=2)
    except (urllib.error.URLError, OSError):
        return None


def _idle_sessions(settings: Settings) -> float:
    """Sessions closed by idleness: every user's last session ends that way."""
    status = _status(settings) or {}
    return float(status.get("memstream_windows_closed", {}).get("session/idle", 0))


def _wait(check: Any, timeout: float, what: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait for ``check``, showing how long so far: a line rewritten in place on a terminal, a line
    every PROGRESS_EVERY_S otherwise (a log, a pipe)."""
    start = time.monotonic()
    tty, shown = sys.stderr.isatty(), 0.0
    try:
        while (elapsed := time.monotonic() - start) < timeout:
            if proc.poll() is not None:
                raise SystemExit(f"the pipeline exited with code {proc.returncode}; see {log}")
            if check():
                return
            if tty:
                print(f"\r  waiting for {what} ... {elapsed:.0f}s", end="", file=sys.stderr, flush=True)
            elif elapsed - shown >= PROGRESS_EVERY_S:
                print(f"  still waiting for {what} ({elapsed:.0f}s)", flush=True)
                shown = elapsed
            time.sleep(0.5)
        raise SystemExit(f"timed out waiting for {what}; see {log}")
    finally:
        if tty:
            print("\r\033[K", end="", file=sys.stderr, flush=True)  # the progress line, erased

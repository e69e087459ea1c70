"""Freshness: how long after `202 Accepted` does recall return the turn?

    python bench/freshness.py [--rate 25] [--recall-rate 25] [--seconds 30] [--embedder minilm] --json

Starts its own Tansu broker and `memstream up` as bench/load.py does (one worker, the gateway on a
free port of 127.0.0.1, one API key, hash embedder unless --embedder minilm), preloads the sample
set and waits until it is stored and consolidation has settled. Then, for ``--seconds``:

* ``--rate`` turns per second at fixed arrival times, each a new turn of one of ``--users`` new
  users whose text (a line of the sample set) carries a code word of its own, a random word no
  other turn holds;
* ``--recall-rate`` ordinary recall queries per second (bench/load.py's) for the sample's users;
* per fresh user, one poller: every ``--poll-interval`` it asks ``POST /v1/recall`` for the code
  words of that user's turns accepted and not yet found (BM25 makes a rare word a candidate), and
  a turn counts as found when an item of the answer names it in ``source_turn_ids``.

A turn's freshness is the time from its 202's arrival to the arrival of the first answer that
returns it, from a poll sent after the 202 (so it includes up to one poll interval and one recall's
latency); a turn not found within ``--found-timeout`` is a miss, counted apart: the percentiles are
over the turns found. ``ingest`` reports the worker's ingest batches meanwhile (how many, how full,
each stage's mean time), ``missed_stored`` the misses in the store once the worker stopped. Every
loop is bounded in count and time; every process it starts is stopped (its own process group),
never looked up by name.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import string
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from memstream.adapters.broker import Broker, free_port
from memstream.adapters.kafka import settled
from memstream.adapters.settings import Settings

# The repository root, for bench/harness.py when run as `python bench/freshness.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.harness import (
    KEY,
    NOW,
    QUERIES,
    Loopback,
    machine,
    ms,
    percentile,
    preload,
    sample_turns,
    start_gateway,
    stop,
    stored_turn_ids,
    wait,
)

# The code words of one poll: the oldest of the user's turns not yet found. With BM25's 100
# lexical candidates and a 4,000-token budget every one of them fits the answer.
MAX_WORDS_PER_POLL = 16
POLL_BUDGET_TOKENS = 4000
REQUEST_TIMEOUT_S = 5.0
INGEST_SERIES = ("memstream_ingest_batch_size", "memstream_ingest_stage_seconds")


@dataclass
class Fresh:
    turn_id: str
    user_id: str
    word: str
    accepted: float  # perf_counter at the 202's arrival
    polls: int = 0


@dataclass
class Tally:
    pending: dict[str, list[Fresh]] = field(default_factory=dict)  # per user, oldest first
    found: list[tuple[Fresh, float]] = field(default_factory=list)  # with 202-to-recallable, seconds
    missed: list[Fresh] = field(default_factory=list)
    turn_outcomes: Counter[str] = field(default_factory=Counter)
    turn_ok: list[float] = field(default_factory=list)  # 202 latency from the scheduled send
    recall_outcomes: Counter[str] = field(default_factory=Counter)
    recall_ok: list[float] = field(default_factory=list)
    poll_outcomes: Counter[str] = field(default_factory=Counter)
    poll_ok: list[float] = field(default_factory=list)


def ingest_counters(settings: Settings) -> dict[str, float]:
    """The worker's ingest batch histograms (turns per batch, seconds per stage): sums and counts."""
    url = f"http://127.0.0.1:{settings.worker.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith(INGEST_SERIES) and name.split("{")[0].endswith(("_sum", "_count")):
            out[name] = float(value)
    return out


def ingest_batches(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, Any]:
    """The ingest batches between two :func:`ingest_counters`: how many, how full, each stage's mean time."""
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    batches = delta.get("memstream_ingest_batch_size_count", 0.0)
    stages = {}
    for name, total in delta.items():
        if name.startswith("memstream_ingest_stage_seconds_sum"):
            stage = name.split('stage="', 1)[1].split('"', 1)[0]
            count = delta.get(name.replace("_sum", "_count", 1), 0.0)
            stages[stage] = round(total / count * 1000, 1) if count else None
    return {
        "batches": int(batches),
        "batches_per_s": round(batches / seconds, 1),
        "turns_per_batch": round(delta.get("memstream_ingest_batch_size_sum", 0.0) / batches, 1)
        if batches
        else None,
        "stage_ms_per_batch": stages,
    }


def code_word(rng: random.Random) -> str:
    """A random word of 10 lowercase letters: no English word, so only its own turn holds it."""
    return "".join(rng.choices(string.ascii_lowercase, k=10))


async def _post(client: Loopback, path: str, body: Any) -> tuple[str, bytes]:
    """The outcome (a status code, "timeout" or "error") and body of one POST."""
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            status, _, content = await client.exchange(path, body)
        return str(status), content
    except TimeoutError:
        return "timeout", b""
    except Exception:  # connection refused or reset, protocol errors: counted, never raised
        return "error", b""


async def measure(
    port: int,
    rate: float,
    recall_rate: float,
    seconds: float,
    users: int,
    poll_interval: float,
    found_timeout: float,
    seed: int,
    recall_users: list[str],
) -> tuple[Tally, dict[str, float]]:
    rng = random.Random(seed)
    lines = [
        m["content"]
        for t in sample_turns()
        for m in t["messages"]
        if m["role"] == "user" and len(m["content"].split()) >= 6
    ]
    fresh_users = [f"fresh-{u}" for u in range(users)]
    tally = Tally(pending={u: [] for u in fresh_users})
    client = Loopback("127.0.0.1", port, {"Authorization": f"Bearer {KEY}"})
    n_turns, n_recalls = round(rate * seconds), round(recall_rate * seconds)
    sending = {"done": False}

    async def post_turn(i: int, scheduled: float) -> None:
        user, word = fresh_users[i % users], code_word(rng)
        turn_id = f"{user}-t{i}"
        turn: dict[str, Any] = {
            "user_id": user,
            "session_id": f"{user}-s0",
            "turn_id": turn_id,
            "ts": datetime.now(UTC).isoformat(),
            "messages": [
                {"speaker": "Sam", "role": "user", "content": f"{rng.choice(lines)} The code word is {word}."}
            ],
        }
        outcome, _ = await _post(client, "/v1/turns", turn)
        arrived = time.perf_counter()
        tally.turn_outcomes[outcome] += 1
        if outcome == "202":
            tally.turn_ok.append(arrived - scheduled)
            tally.pending[user].append(Fresh(turn_id, user, word, arrived))

    async def post_recall(i: int, scheduled: float) -> None:
        body = {
            "user_id": recall_users[i % len(recall_users)],
            "query": QUERIES[i % len(QUERIES)],
            "now": NOW,
        }
        outcome, _ = await _post(client, "/v1/recall", body)
        tally.recall_outcomes[outcome] += 1
        if outcome.startswith("2"):
            tally.recall_ok.append(time.perf_counter() - scheduled)

    async def open_loop(count: int, per_s: float, send: Any) -> float:
        """``count`` requests at fixed arrival times; the achieved send rate."""
        tasks = []
        t0 = time.perf_counter()
        for i in range(count):
            delay = t0 + i / per_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(i, t0 + i / per_s)))
        took = time.perf_counter() - t0  # first send to last: count - 1 intervals
        await asyncio.wait(tasks, timeout=REQUEST_TIMEOUT_S + 5)
        return (count - 1) / took if count > 1 and took > 0 else per_s

    async def poll(user: str, deadline: float) -> None:
        pending = tally.pending[user]
        while time.perf_counter() < deadline and (pending or not sending["done"]):
            started = time.perf_counter()
            for f in [f for f in pending if started - f.accepted > found_timeout]:
                pending.remove(f)
                tally.missed.append(f)
            asked = pending[:MAX_WORDS_PER_POLL]  # all accepted before this poll is sent
            if asked:
                body = {
                    "user_id": user,
                    "query": "code word " + " ".join(f.word for f in asked),
                    "budget_tokens": POLL_BUDGET_TOKENS,
                }
                outcome, content = await _post(client, "/v1/recall", body)
                arrived = time.perf_counter()
                tally.poll_outcomes[outcome] += 1
                if outcome == "200":
                    tally.poll_ok.append(arrived - started)
                    returned = {i for item in orjson.loads(content)["items"] for i in item["source_turn_ids"]}
                    for f in asked:
                        f.polls += 1
                        if f.turn_id in returned:
                            pending.remove(f)
                            tally.found.append((f, arrived - f.accepted))
            await asyncio.sleep(max(0.0, started + poll_interval - time.perf_counter()))
        tally.missed.extend(pending)  # past the deadline: bounded, counted as misses
        pending.clear()

    try:
        deadline = time.perf_counter() + seconds + found_timeout + REQUEST_TIMEOUT_S + 10
        pollers = [asyncio.create_task(poll(u, deadline)) for u in fresh_users]
        turns_rate, recall_sent_rate = await asyncio.gather(
            open_loop(n_turns, rate, post_turn), open_loop(n_recalls, recall_rate, post_recall)
        )
        sending["done"] = True
        await asyncio.wait(pollers, timeout=found_timeout + REQUEST_TIMEOUT_S + 15)
        for task in pollers:
            task.cancel()
    finally:
        await client.aclose()
    return tally, {"turns": turns_rate, "recall": recall_sent_rate}


def run(
    rate: float = 25.0,
    recall_rate: float = 25.0,
    seconds: float = 30.0,
    users: int = 3,
    embedder: str = "hash",
    poll_interval: float = 0.1,
    found_timeout: float = 10.0,
    seed: int = 19,
    worker_env: dict[str, str] | None = None,
    preload_turns: int | None = None,
) -> dict[str, Any]:
    """``preload_turns``: the first so many turns of the sample set are preloaded (None: all); the
    ordinary recalls ask for their users."""
    base = sample_turns()[:preload_turns]
    recall_users = sorted({t["user_id"] for t in base})
    work = Path(tempfile.mkdtemp(prefix="memstream-freshness-"))
    with Broker(free_port(), work / "tansu.log") as broker:
        settings, proc, log, port = start_gateway(broker, work, embedder, **(worker_env or {}))
        try:
            preloaded = preload(port, base, settings, proc, log)
            wait(
                lambda: asyncio.run(settled(settings)),
                300,
                "consolidation of the preload to settle",
                proc,
                log,
            )
            print(
                f"preloaded {preloaded} turns; {rate:g} turns/s, {recall_rate:g} recalls/s, {seconds:g} s",
                file=sys.stderr,
                flush=True,
            )
            before = ingest_counters(settings)
            tally, sent = asyncio.run(
                measure(
                    port, rate, recall_rate, seconds, users, poll_interval, found_timeout, seed, recall_users
                )
            )
            ingest = ingest_batches(before, ingest_counters(settings), seconds)
        finally:
            stop(proc)
        stored = stored_turn_ids(settings)
    times = [t for _, t in tally.found]
    accepted = len(tally.found) + len(tally.missed)
    polls = sum(tally.poll_outcomes.values())
    return {
        "rate": rate,
        "recall_rate": recall_rate,
        "seconds": seconds,
        "users": users,
        "turns": accepted,  # accepted (202) turns, each measured
        "turns_sent": sum(tally.turn_outcomes.values()),
        "turn_outcomes": dict(tally.turn_outcomes),
        "found": len(tally.found),
        "missed": len(tally.missed),
        # missed, yet in the units collection once the worker stopped: stored late, or not returned
        "missed_stored": sum(f.turn_id in stored for f in tally.missed),
        "missed_asked_p50": percentile([float(f.polls) for f in tally.missed], 50),
        "p50_ms": ms(percentile(times, 50)),
        "p95_ms": ms(percentile(times, 95)),
        "p99_ms": ms(percentile(times, 99)),
        "max_ms": ms(max(times)) if times else None,
        "min_ms": ms(min(times)) if times else None,
        "under_1s": sum(t < 1.0 for t in times),
        "polls_per_turn_p50": percentile([float(f.polls) for f, _ in tally.found], 50),
        "poll_interval_ms": round(poll_interval * 1000),
        "found_timeout_s": found_timeout,
        "achieved_turn_rate": round(sent["turns"], 1),
        "achieved_recall_rate": round(sent["recall"], 1),
        "poll_rate": round(polls / seconds, 1),
        "accept_p50_ms": ms(percentile(tally.turn_ok, 50)),
        "accept_p99_ms": ms(percentile(tally.turn_ok, 99)),
        "recall_outcomes": dict(tally.recall_outcomes),
        "recall_p50_ms": ms(percentile(tally.recall_ok, 50)),
        "recall_p99_ms": ms(percentile(tally.recall_ok, 99)),
        "poll_outcomes": dict(tally.poll_outcomes),
        "poll_p50_ms": ms(percentile(tally.poll_ok, 50)),
        "poll_p99_ms": ms(percentile(tally.poll_ok, 99)),
        "ingest": ingest,  # the worker's ingest batches during the run (turns, recalls, polls)
        "preloaded_turns": preloaded,
        "embedder": embedder,
        "worker_env": worker_env or {},
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=25.0, help="new turns per second (default 25)")
    p.add_argument("--recall-rate", type=float, default=25.0, help="ordinary recalls per second (default 25)")
    p.add_argument("--seconds", type=float, default=30.0, help="load time (default 30)")
    p.add_argument("--users", type=int, default=3, help="users the new turns are spread over (default 3)")
    p.add_argument("--poll-interval", type=float, default=0.1, help="seconds between a user's polls (0.1)")
    p.add_argument(
        "--found-timeout", type=float, default=10.0, help="a turn not found by then is a miss (10)"
    )
    p.add_argument("--seed", type=int, default=19, help="seed of the code words and texts")
    p.add_argument(
        "--embedder", choices=["hash", "minilm"], default="hash", help="MEMSTREAM_EMBEDDER (default hash)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="MEMSTREAM_NAME=VALUE",
        help="more environment for `memstream up` (e.g. MEMSTREAM_BATCH_WITHIN_S=0.05), repeatable",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (default: a summary)")
    args = p.parse_args()
    if min(args.rate, args.recall_rate, args.seconds, args.poll_interval, args.found_timeout) <= 0:
        p.error("rates, seconds, poll interval and timeout: positive")
    if args.users < 1:
        p.error("--users: at least 1")
    env = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("MEMSTREAM_"):
            p.error(f"--set {item!r}: MEMSTREAM_NAME=VALUE")
        env[name] = value
    result = run(
        args.rate,
        args.recall_rate,
        args.seconds,
        args.users,
        args.embedder,
        args.poll_interval,
        args.found_timeout,
        args.seed,
        env,
    )
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        return
    print(
        f"{result['found']} of {result['turns']} turns recallable (missed {result['missed']}); "
        f"202-to-recallable p50 {result['p50_ms']} ms, p95 {result['p95_ms']} ms, "
        f"p99 {result['p99_ms']} ms, max {result['max_ms']} ms "
        f"({result['rate']:g} turns/s, {result['recall_rate']:g} recalls/s, {result['embedder']})"
    )


if __name__ == "__main__":
    main()

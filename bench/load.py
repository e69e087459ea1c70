"""The gateway under load: open-loop ingest and recall at rising rates, on loopback.

    python bench/load.py [--rates 25,50,100,200,400] [--seconds 60 | --step-seconds S] --json

Starts its own Tansu broker and `memstream up` (hash embedder, or with --embedder minilm the local
MiniLM for turns and queries; one worker, the gateway on a free port, 127.0.0.1 only, one API key
whose rate limit cannot interfere), posts the turns of
examples/sample.jsonl and waits until they are stored, then sends requests at a fixed arrival
rate per step (open loop: a slow gateway shows up as queueing, 503 or timeouts, not as a lower
send rate), alternating POST /v1/turns (one new turn, a new turn_id) and POST /v1/recall.
Latency is measured from each request's scheduled send time, so client-side lag counts against
the gateway rather than hiding it. Afterwards it waits until the pipeline has stored every
accepted turn, stops it, and reads the units collection: accepted turns missing from it are lost.

Every loop is bounded in count and time; every process it starts is stopped (its own process
group), never looked up by name.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

# The repository root, for bench/harness.py when run as `python bench/load.py`.
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
from memstream.adapters.broker import Broker, free_port
from memstream.apps.status import fetch_status

# Requests the load generator keeps open at once (open connections); see run_step.
MAX_OUTSTANDING = 256


async def run_step(
    client: Loopback,
    step: int,
    rate: float,
    seconds: float,
    timeout: float,
    base: list[dict[str, Any]],
    max_outstanding: int,
) -> dict[str, Any]:
    """``rate`` requests per second for ``seconds`` at fixed arrival times; every request is
    either answered, shed, or counted as a timeout/error within ``timeout``. An arrival while
    ``max_outstanding`` requests are still open is not sent and is counted (``client_overflow``):
    the generator's own limit, reported apart from the gateway's answers."""
    n = max(1, round(rate * seconds))
    users = sorted({t["user_id"] for t in base})
    outcomes: list[tuple[str, str, float]] = []  # kind, outcome, latency from the scheduled time
    lags: list[float] = []
    accepted: list[str] = []
    refused: list[str] = []
    errors: Counter[str] = Counter()
    no_retry_after: Counter[str] = Counter()  # 429/503 without Retry-After

    async def one(i: int, scheduled: float) -> None:
        lags.append(time.perf_counter() - scheduled)
        if i % 2 == 0:
            turn = {**base[(step * 7919 + i) % len(base)], "turn_id": f"load-{step}-{i}"}
            kind, path, body = "turns", "/v1/turns", turn
        else:
            body = {"user_id": users[i % len(users)], "query": QUERIES[i % len(QUERIES)], "now": NOW}
            kind, path = "recall", "/v1/recall"
        try:
            async with asyncio.timeout(timeout):  # the whole request, not each phase
                status, headers = await client.post(path, body)
            outcome = str(status)
            if status in (429, 503) and not headers.get("retry-after"):
                no_retry_after[outcome] += 1
        except TimeoutError:
            outcome = "timeout"
        except Exception as exc:  # connection refused or reset, protocol errors: counted, never raised
            outcome = "error"
            errors[type(exc).__name__] += 1
        outcomes.append((kind, outcome, time.perf_counter() - scheduled))
        if kind == "turns":
            (accepted if outcome == "202" else refused).append(f"load-{step}-{i}")

    tasks: list[asyncio.Task[None]] = []
    overflow = 0  # arrivals not sent: the client already had max_outstanding requests open
    t0 = time.perf_counter()
    for i in range(n):
        scheduled = t0 + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if len(tasks) - len(outcomes) >= max_outstanding:
            overflow += 1
            continue
        tasks.append(asyncio.create_task(one(i, scheduled)))
    sending = time.perf_counter() - t0
    _, pending = await asyncio.wait(tasks, timeout=timeout + 10)
    for task in pending:  # cannot happen with the client's own timeout; bounded regardless
        task.cancel()
    codes = Counter(outcome for _, outcome, _ in outcomes)
    answered = [lat for _, outcome, lat in outcomes if outcome not in ("timeout", "error")]
    ok = [lat for _, outcome, lat in outcomes if outcome.startswith("2")]
    by_kind = {
        kind: dict(Counter(outcome for k, outcome, _ in outcomes if k == kind))
        for kind in ("turns", "recall")
    }
    ok_by_kind = {kind: [t for k, o, t in outcomes if k == kind and o.startswith("2")] for kind in by_kind}
    latency_by_kind = {  # answered 2xx only
        kind: {f"p{q}_ms": ms(percentile(lats, q)) for q in (50, 95, 99)} for kind, lats in ok_by_kind.items()
    }
    return {
        "rate": rate,
        "seconds": round(seconds, 1),
        "scheduled": n,
        "sent": len(tasks),
        "client_overflow": overflow,
        "achieved_send_rate": round(len(tasks) / sending, 1) if sending > 0 else None,
        "ok": sum(v for k, v in codes.items() if k.startswith("2")),
        "429": codes["429"],
        "503": codes["503"],
        "other_status": sum(v for k, v in codes.items() if k[0] in "345" and k not in ("429", "503")),
        "timeouts": codes["timeout"],
        "errors": codes["error"] + len(pending),
        "p50_ms": ms(percentile(answered, 50)),
        "p95_ms": ms(percentile(answered, 95)),
        "p99_ms": ms(percentile(answered, 99)),
        "ok_p99_ms": ms(percentile(ok, 99)),
        "max_ms": ms(max(answered)) if answered else None,
        "client_lag_p99_ms": ms(percentile(lags, 99)),
        "error_kinds": dict(errors),
        "shed_without_retry_after": dict(no_retry_after),
        "by_kind": by_kind,
        "ok_latency_by_kind": latency_by_kind,
        "accepted_turn_ids": accepted,
        "refused_turn_ids": refused,
    }


def gateway_counters(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(("memstream_gateway_shed_total", "memstream_gateway_rate_limited_total")):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def run(
    rates: list[float],
    step_seconds: float,
    timeout: float,
    max_in_flight: int | None,
    embedder: str = "hash",
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="memstream-load-"))
    base = sample_turns()
    with Broker(free_port(), work / "tansu.log") as broker:
        settings, proc, log, port = start_gateway(
            broker,
            work,
            embedder,
            **({"MEMSTREAM_GATEWAY_MAX_IN_FLIGHT": str(max_in_flight)} if max_in_flight is not None else {}),
        )
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {KEY}"}
        try:
            preloaded = preload(port, base, settings, proc, log)
            print(f"preloaded {preloaded} turns; stepping through {rates} req/s", file=sys.stderr, flush=True)

            async def steps() -> list[dict[str, Any]]:
                # One connection per open request (up to MAX_OUTSTANDING), kept alive between them;
                # arrivals past that are counted, not sent.
                out = []
                client = Loopback("127.0.0.1", port, headers)
                try:
                    for s, rate in enumerate(rates):
                        out.append(
                            await run_step(client, s, rate, step_seconds, timeout, base, MAX_OUTSTANDING)
                        )
                        r = out[-1]
                        print(
                            f"{rate:g} req/s: sent {r['sent']} (not sent {r['client_overflow']}) "
                            f"ok {r['ok']} 429 {r['429']} 503 {r['503']} "
                            f"timeouts {r['timeouts']} errors {r['errors']} p50/p95/p99 {r['p50_ms']}/"
                            f"{r['p95_ms']}/{r['p99_ms']} ms; recall 2xx p50/p95/p99 "
                            f"{'/'.join(str(v) for v in r['ok_latency_by_kind']['recall'].values())} ms",
                            file=sys.stderr,
                            flush=True,
                        )
                        await asyncio.sleep(2)  # let the previous step's queue drain
                finally:
                    await client.aclose()
                return out

            results = asyncio.run(steps())
            counters = gateway_counters(url)
            accepted = {i for r in results for i in r["accepted_turn_ids"]}
            refused = {i for r in results for i in r["refused_turn_ids"]}
            expected = preloaded + len(accepted)
            t_drain = time.monotonic()
            wait(
                lambda: fetch_status(settings)["units_in_store"] >= expected,
                300,
                "every accepted turn to be stored",
                proc,
                log,
            )
            drain_s = time.monotonic() - t_drain
            time.sleep(3)  # turns refused by a 503/timeout may still land (the gateway says so)
        finally:
            stop(proc)

        stored = stored_turn_ids(settings)

    steps_out = []
    for r in results:
        ids = set(r.pop("accepted_turn_ids"))
        r.pop("refused_turn_ids")
        r["accepted_turns"] = len(ids)
        r["lost_turns"] = len(ids - stored)
        steps_out.append(r)
    sustained = [
        r["rate"]
        for r in steps_out
        if r["p99_ms"] is not None
        and r["p99_ms"] < 100
        and r["timeouts"] == 0
        and r["errors"] == 0
        and r["503"] == 0
        and r["429"] == 0
        and r["client_overflow"] == 0
    ]
    shed_total = sum(v for k, v in counters.items() if k.startswith("memstream_gateway_shed_total"))
    return {
        "rates": rates,
        "step_seconds": step_seconds,
        "client_timeout_s": timeout,
        "gateway_max_in_flight": settings.gateway.gateway_max_in_flight,
        "embedder": settings.embedding.embedder,
        "mix": "alternating POST /v1/turns (one new turn) and POST /v1/recall",
        "preloaded_turns": preloaded,
        "steps": steps_out,
        "sustained_rate_p99_under_100ms": max(sustained) if sustained else None,
        "shed": {
            "503": sum(r["503"] for r in steps_out),
            "429": sum(r["429"] for r in steps_out),
            "gateway_counters": counters,
            "gateway_shed_total": shed_total,
        },
        "accepted_turns": len(accepted),
        "lost_turns": len(accepted - stored),
        "refused_turns_stored_anyway": len(refused & stored),
        "drain_s": round(drain_s, 1),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="25,50,100,200,400", help="requests per second per step")
    p.add_argument("--seconds", type=float, default=60.0, help="total load time, split across the steps")
    p.add_argument("--step-seconds", type=float, default=None, help="seconds per step (overrides --seconds)")
    p.add_argument("--timeout", type=float, default=5.0, help="client timeout per request (default 5 s)")
    p.add_argument("--max-in-flight", type=int, default=None, help="MEMSTREAM_GATEWAY_MAX_IN_FLIGHT")
    p.add_argument(
        "--embedder",
        choices=["hash", "minilm"],
        default="hash",
        help="MEMSTREAM_EMBEDDER of the worker and gateway (default hash; minilm embeds every turn and "
        "query with the local MiniLM model)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (default: a table)")
    args = p.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    if not rates or any(r <= 0 for r in rates):
        p.error("--rates: positive numbers, comma-separated")
    step_seconds = args.step_seconds or args.seconds / len(rates)
    result = run(rates, step_seconds, args.timeout, args.max_in_flight, args.embedder)
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        return
    print("| rate | sent | ok | 429 | 503 | timeouts/errors | p50 ms | p95 ms | p99 ms | lost |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in result["steps"]:
        print(
            f"| {r['rate']:g} | {r['sent']} | {r['ok']} | {r['429']} | {r['503']} | "
            f"{r['timeouts'] + r['errors']} | {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | "
            f"{r['lost_turns']} |"
        )
    print(
        "sustained (p99 < 100 ms, nothing shed or timed out): "
        f"{result['sustained_rate_p99_under_100ms']} req/s"
    )
    print(f"lost turns: {result['lost_turns']} of {result['accepted_turns']} accepted")


if __name__ == "__main__":
    main()

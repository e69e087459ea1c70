"""Per-user state at scale (issue 19): ingest rate, worker memory, state bytes per user, restart time
and idle closing, for a ladder of user counts.

    python -m bench.scale [--users 100000] [--turns-per-user 3] [--roles ingest] [--broker kafka] [--json]

Sizes: 1,000 users, then ten times more until --users (1,000 → 10,000 → 100,000 for --users 100000).
Each size gets a fresh broker (Tansu, or Apache Kafka with --broker kafka: `memstream up`'s embedded
one, memstream/adapters/embedded_broker.py) and one `memstream up` worker (hash embedder, --roles), then:

1. **ingest**: every user's --turns-per-user turns (one session a user, dated days before today),
   produced round-robin over the users; `turns_per_s` = turns ÷ (first produce → every turn
   committed by the worker). `ratio_to_1k_users` divides by the 1,000-user size of the same run.
2. **memory**: RSS of `memstream up` and its worker (VmRSS summed over the process tree) once drained,
   and `rss_anon_mib`, its anonymous part (RssAnon: the heap); the rest is file pages, mostly the
   embedded store's memory-mapped segments, which the kernel can drop and read back.
3. **state**: the bytes the worker's per-user tables hold, read back from their changelog topics
   (the latest value of each key, key and value bytes), ÷ users: `state_bytes_per_user`.
4. **restart**: the worker stopped (SIGTERM) and started again, with a 1 s idle close;
   `restart_to_ready_s` = start → a new turn sent after the start is stored (tables recovered,
   partitions owned, ingest running), not merely /readyz.
5. **idle closing**: from that restart until every user's session was closed for idleness
   (`memstream_windows_closed_total{level="session",reason="idle"}` = users): `idle_close_all_s`,
   and `idle_closed_per_s`. With --idle-close-seconds S it is watched for at most S seconds: if not
   every session closed by then, `idle_close_all_s` is null and `idle_closed_per_s` is the rate so far.

Each size's figures go to stderr as soon as they are measured. Long: 1,000,000 users is 3,000,000
turns through one worker (about an hour of ingest on the 2-core machine; `--turns-per-user 1`, about
20 minutes). Every wait is bounded by --max-seconds for the whole run; every process started is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer

from bench.harness import bench_broker, start_up, stop, wait
from bench.soak import memory_kib
from memstream.adapters.embedded_broker import BrokerKind
from memstream.adapters.kafka import client_kwargs, read_records, wait_processed
from memstream.adapters.settings import Settings
from memstream.apps.datasets import RawRecord
from memstream.apps.replay import replay
from memstream.apps.status import fetch_status
from memstream.schemas.events import Message, Turn
from memstream.schemas.topics import TURNS

TENANT = "scale"
FIRST = 1_000


def turns(users: int, per_user: int, salt: str = "") -> Iterator[RawRecord]:
    """``per_user`` turns of each of ``users`` users, round-robin: one session a user, a turn a minute,
    two days ago (so that idleness closes the calendar windows too)."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
    for n in range(per_user):
        for u in range(users):
            turn = Turn(
                tenant=TENANT,
                user_id=f"u{u:07d}{salt}",
                session_id="s1",
                turn_id=f"t{n}",
                ts=start + timedelta(minutes=n),
                messages=[
                    Message(
                        speaker="user", content=f"Note {n}: I walked {u % 97} minutes by the river today."
                    ),
                    Message(
                        speaker="assistant", role="assistant", content="Good to hear. Same time tomorrow?"
                    ),
                ],
            )
            yield RawRecord(turn.key, turn.to_bytes())


async def table_bytes(settings: Settings) -> dict[str, int]:
    """Bytes of the latest value of each key (key included) in each changelog topic of the app, by
    table. Read until idle (Tansu's end offsets are not to be trusted: see docs/configuration.md) for 15 s: a
    first fetch from a broker holding a million users' records took more than 2 s."""
    consumer = AIOKafkaConsumer(**client_kwargs(settings))
    await consumer.start()
    try:
        names = sorted(t for t in await consumer.topics() if t.endswith("-changelog"))
    finally:
        await consumer.stop()
    out: dict[str, int] = {}
    for name in names:
        latest: dict[bytes, int] = {}
        for r in await read_records(settings, name, idle_s=15.0):
            if r.value is None:
                latest.pop(r.key or b"", None)
            else:
                latest[r.key or b""] = len(r.key or b"") + len(r.value)
        out[name.removeprefix(f"{settings.kafka.app_id}-").removesuffix("-changelog")] = sum(latest.values())
    return out


def closed_idle_sessions(settings: Settings) -> float:
    """Sessions the running worker closed for idleness (the users', the warm-up's and the probe's)."""
    return float(fetch_status(settings).get("memstream_windows_closed", {}).get("session/idle", 0))


def watch_idle_closing(
    closed_now: Callable[[], float],
    sessions: int,
    started: float,
    until: float,
    proc: subprocess.Popen[bytes],
    log: Path,
) -> tuple[float | None, float]:
    """Seconds from ``started`` until ``closed_now()`` (sessions closed for idleness) reached
    ``sessions`` (None if not by ``until``, a monotonic time), and the sessions closed per second
    meanwhile. A failing ``closed_now`` (the worker busy) counts as no progress."""
    closed = 0.0
    while time.monotonic() < until:
        if proc.poll() is not None:
            raise SystemExit(f"memstream up exited ({proc.returncode}); see {log}")
        with contextlib.suppress(Exception):
            closed = closed_now()
        if closed >= sessions:
            took = time.monotonic() - started
            return took, closed / took
        time.sleep(0.5)
    return None, closed / (time.monotonic() - started)


def one_size(
    users: int,
    per_user: int,
    roles: str,
    deadline: float,
    idle_close_s: float | None = None,
    broker_kind: BrokerKind = "tansu",
) -> dict[str, Any]:
    left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
    work = Path(tempfile.mkdtemp(prefix="memstream-scale-"))
    env = {
        "MEMSTREAM_ROLES": roles,
        "MEMSTREAM_IDLE_CLOSE_S": "86400",
        "MEMSTREAM_IDLE_CHECK_INTERVAL_S": "1",
    }
    try:
        with bench_broker(broker_kind, work) as broker:
            settings, proc, log = start_up(broker, work, **env)
            try:
                probe = list(turns(1, 1, salt="-warm"))
                asyncio.run(replay(settings, probe, wait=True, wait_timeout=left(), progress=False))
                every = list(range(settings.kafka.topic_partitions))
                wait(
                    lambda: fetch_status(settings)["partitions"] == every, left(), "the partitions", proc, log
                )
                print(f"{users:,} users: producing {users * per_user:,} turns", file=sys.stderr, flush=True)
                t0 = time.monotonic()
                report = asyncio.run(replay(settings, turns(users, per_user), total=users * per_user))
                topic = settings.kafka.topic(TURNS.name)
                if not asyncio.run(wait_processed(settings, topic, report.last_offsets, left(), poll=0.5)):
                    raise SystemExit(f"not drained before the deadline; see {log}")
                ingest_s = time.monotonic() - t0
                rss_kib, anon_kib = memory_kib(proc.pid)
                units = fetch_status(settings)["units_in_store"]
            finally:
                stop(proc)
            state = asyncio.run(table_bytes(settings))
            print(f"  ingested in {ingest_s:.1f}s; restarting", file=sys.stderr, flush=True)

            t1 = time.monotonic()
            settings, proc, log = start_up(broker, work, **{**env, "MEMSTREAM_IDLE_CLOSE_S": "1"})
            try:
                after = list(turns(1, 1, salt="-after"))
                report = asyncio.run(replay(settings, after, progress=False))
                wait(
                    lambda: fetch_status(settings)["units_in_store"] > units,
                    left(),
                    "the new turn",
                    proc,
                    log,
                )
                ready_s = time.monotonic() - t1
                until = deadline if idle_close_s is None else min(deadline, t1 + idle_close_s)
                idle_s, idle_rate = watch_idle_closing(
                    lambda: closed_idle_sessions(settings), users + 2, t1, until, proc, log
                )
            finally:
                stop(proc)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not state.get("window-state"):
        print(
            f"  read no window state back from {users:,} users: state_bytes_per_user is null", file=sys.stderr
        )
    size = {
        "users": users,
        "turns": users * per_user,
        "ingest_s": round(ingest_s, 1),
        "turns_per_s": round(users * per_user / ingest_s, 1),
        "rss_mib": round(rss_kib / 1024, 1),
        # The heap; the rest of the RSS is file pages (the embedded store's memory-mapped segments),
        # which the kernel drops under memory pressure and reads back when touched.
        "rss_anon_mib": round(anon_kib / 1024, 1),
        "state_bytes": state,
        "state_bytes_per_user": round(sum(state.values()) / users, 1) if state.get("window-state") else None,
        "restart_to_ready_s": round(ready_s, 1),
        "idle_close_all_s": None if idle_s is None else round(idle_s, 1),
        "idle_closed_per_s": round(idle_rate, 1),
    }
    print(f"  {orjson.dumps(size).decode()}", file=sys.stderr, flush=True)
    return size


def sizes(users: int) -> list[int]:
    """1,000, then ten times more while it stays within ``users``, then ``users`` itself."""
    out = [FIRST]
    while out[-1] * 10 <= users:
        out.append(out[-1] * 10)
    return out if out[-1] == users else [*out, users]


def run(
    users: int,
    per_user: int = 3,
    roles: str = "ingest",
    max_seconds: float = 7200.0,
    idle_close_s: float | None = None,
    broker_kind: BrokerKind = "tansu",
) -> dict[str, Any]:
    """The ladder's figures; the top size's as the result's own keys (see the module's docstring)."""
    deadline = time.monotonic() + max_seconds
    ladder = [one_size(n, per_user, roles, deadline, idle_close_s, broker_kind) for n in sizes(users)]
    for size in ladder:
        size["ratio_to_1k_users"] = round(size["turns_per_s"] / ladder[0]["turns_per_s"], 2)
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "broker": broker_kind,
        "roles": roles,
        "turns_per_user": per_user,
        **ladder[-1],
        "ladder": ladder,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=100_000, help="the largest size (default 100,000)")
    p.add_argument("--turns-per-user", type=int, default=3, help="turns of each user (default 3)")
    p.add_argument("--roles", default="ingest", help="MEMSTREAM_ROLES of the worker (default: ingest)")
    p.add_argument("--max-seconds", type=float, default=7200.0, help="bound on the whole run (7200)")
    p.add_argument(
        "--idle-close-seconds",
        type=float,
        help="watch idle closing for at most this long at each size (default: until every session closed)",
    )
    p.add_argument("--broker", choices=["tansu", "kafka"], default="tansu", help="(default tansu)")
    p.add_argument("--json", action="store_true", help="print one JSON object (default: a table)")
    args = p.parse_args()
    if (
        args.users < FIRST
        or args.turns_per_user < 1
        or args.max_seconds <= 0
        or (args.idle_close_seconds or 1) <= 0
    ):
        p.error(
            f"--users must be at least {FIRST:,}; "
            "--turns-per-user, --max-seconds and --idle-close-seconds positive"
        )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds: the pipeline and broker stopped
    result = run(
        args.users, args.turns_per_user, args.roles, args.max_seconds, args.idle_close_seconds, args.broker
    )
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        return
    print("users       turns/s  ratio  RSS MiB  anon MiB  state B/user  restart s  idle close s")
    for s in result["ladder"]:
        print(
            f"{s['users']:>9,}  {s['turns_per_s']:>8}  {s['ratio_to_1k_users']:>5}  {s['rss_mib']:>7}  "
            f"{s['rss_anon_mib']:>8}  "
            f"{s['state_bytes_per_user']!s:>12}  {s['restart_to_ready_s']:>9}  {s['idle_close_all_s']!s:>12}"
        )


if __name__ == "__main__":
    main()

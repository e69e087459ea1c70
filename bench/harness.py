"""What the benches share: `memstream up` (with its gateway) started on a broker and stopped, waiting
on it, the sample turns posted and found stored, a small keep-alive HTTP/1.1 client for open-loop
load, percentiles, and the machine a run was on. ``bench/load.py`` is the gateway load bench.

Every loop is bounded in count and time; every process started is stopped (its own process group),
never looked up by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

from memstream.adapters.broker import Broker, free_port, free_ports
from memstream.adapters.embedded_broker import BrokerKind, embedded_broker
from memstream.adapters.embedders import make_embedder
from memstream.adapters.kafka import wait_group_coordinator
from memstream.adapters.kafka_server import KafkaServer
from memstream.adapters.processes import stop_session as stop
from memstream.adapters.settings import KafkaSettings, Settings, StorageSettings
from memstream.adapters.store import all_stores, open_shards, scroll_all
from memstream.apps.status import fetch_status
from memstream.core.unit_views import views_spec
from memstream.core.units import UNITS, unit_from_payload, units_spec

__all__ = ["stop"]  # the benches stop what start_up started with it

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "sample.jsonl"
KEY = "load-bench-key-0123456789abcdef"
TENANT = "bench"
QUERIES = ["Where am I moving to?", "What happened last week?", "What do I like?", "When did I last travel?"]
NOW = "2025-03-01T12:00:00Z"
# A keep-alive connection idle longer than this is closed, not reused: uvicorn closes one idle
# for 5 s, and a request written as it does so fails (IncompleteReadError) through no fault of
# the gateway's load.
IDLE_REUSE_S = 2.0


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def sample_turns() -> list[dict[str, Any]]:
    turns = []
    for line in SAMPLE.read_text().splitlines():
        turn = json.loads(line)
        turn.pop("tenant", None)
        turns.append(turn)
    return turns


class Loopback:
    """A minimal HTTP/1.1 client for the load steps: keep-alive connections over asyncio streams,
    one request per connection at a time, Content-Length bodies only (what the gateway sends).
    The generator shares the cores with the gateway: with httpx's AsyncClient it fell 1-4 s
    behind its schedule at 100-400 req/s, could not send most arrivals, and took CPU the gateway
    needed to answer (even to refuse). Latency is still measured from each scheduled send time."""

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port = host, port
        self.head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": f"{host}:{port}", **headers}.items())
        # (reader, writer, when it went idle); uvicorn closes a connection idle for 5 s
        self.idle: deque[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = deque()
        self.open: set[asyncio.StreamWriter] = set()

    async def post(self, path: str, body: Any) -> tuple[int, dict[str, str]]:
        """Status and headers (lower-case names) of one POST; raises on any connection problem."""
        status, headers, _ = await self.exchange(path, body)
        return status, headers

    async def exchange(self, path: str, body: Any) -> tuple[int, dict[str, str], bytes]:
        """Status, headers (lower-case names) and body of one POST; raises on any connection problem."""
        data = orjson.dumps(body)
        now = time.monotonic()
        while self.idle and now - self.idle[0][2] > IDLE_REUSE_S:  # oldest first
            self._drop(self.idle.popleft()[1])
        if self.idle:
            reader, writer, _ = self.idle.pop()
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self.open.add(writer)
        reusable = False
        try:
            writer.write(
                f"POST {path} HTTP/1.1\r\n{self.head}Content-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n".encode()
                + data
            )
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            status = int(head[0].split(" ", 2)[1])
            headers = {}
            for line in head[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            content = await reader.readexactly(int(headers.get("content-length", "0")))
            reusable = headers.get("connection", "").lower() != "close"
            return status, headers, content
        finally:
            if reusable:
                self.idle.append((reader, writer, time.monotonic()))
            else:  # closed by the server, a timeout or an error: never reused
                self._drop(writer)

    def _drop(self, writer: asyncio.StreamWriter) -> None:
        self.open.discard(writer)
        writer.close()

    async def aclose(self) -> None:
        for writer in self.open:
            writer.close()
        self.open.clear()
        self.idle.clear()


def wait(predicate: Any, timeout: float, what: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"memstream up exited ({proc.returncode}); see {log}")
        with contextlib.suppress(Exception):
            if predicate():
                return
        time.sleep(0.5)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}; see {log}")


@contextlib.contextmanager
def bench_broker(kind: BrokerKind, work: Path) -> Iterator[Broker | KafkaServer]:
    """`memstream up`'s embedded broker of ``kind`` (memstream/adapters/embedded_broker.py: Tansu,
    or Apache Kafka with its log on disk) on a free port of 127.0.0.1, its log and pidfile under
    ``work/broker``; on Kafka once its group coordinator answers, as `memstream up` waits before its
    workers join (else the first join meets COORDINATOR_NOT_AVAILABLE for seconds)."""
    (work / "broker").mkdir(parents=True, exist_ok=True)
    settings = Settings(kafka=KafkaSettings(broker=kind), storage=StorageSettings(data_dir=work / "broker"))
    with embedded_broker(settings, free_port()) as broker:
        if kind == "kafka":
            asyncio.run(
                wait_group_coordinator(Settings(kafka=KafkaSettings(bootstrap_servers=broker.bootstrap)))
            )
        yield broker


def broker_env(broker: Broker | KafkaServer) -> dict[str, str]:
    """The environment that points `memstream up` at ``broker``, with Tansu's work-arounds on Tansu only."""
    return {
        "MEMSTREAM_BOOTSTRAP_SERVERS": broker.bootstrap,
        "MEMSTREAM_TANSU_QUIRKS": str(not isinstance(broker, KafkaServer)).lower(),
    }


def start_up(
    broker: Broker | KafkaServer, work: Path, **overrides: str
) -> tuple[Settings, subprocess.Popen[bytes], Path]:
    """`memstream up` against ``broker`` in its own session (see :func:`stop`): one worker, hash
    embedder, everything under ``work``, 127.0.0.1 only, no gateway unless ``overrides`` name a
    port. Its settings, its process and its log."""
    env = {
        **os.environ,
        **broker_env(broker),
        "MEMSTREAM_DATA_DIR": str(work / "data"),
        "MEMSTREAM_EMBEDDER": "hash",
        "MEMSTREAM_METRICS_HOST": "127.0.0.1",
        "MEMSTREAM_GATEWAY_PORT": "0",
        "MEMSTREAM_GATEWAY_HOST": "127.0.0.1",
        "MEMSTREAM_LOG_LEVEL": "WARNING",
        "MEMSTREAM_WORKERS": "1",
        **overrides,
    }
    if "MEMSTREAM_METRICS_PORT" not in overrides:  # worker i serves on the first port + i
        env["MEMSTREAM_METRICS_PORT"] = str(free_ports(int(env["MEMSTREAM_WORKERS"])))
    log = work / "pipeline.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "memstream.apps.cli", "up"],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return Settings.from_env(env), proc, log


def stored_turn_ids(settings: Settings) -> set[str]:
    """The turn ids in the units collection of every partition (the worker stopped: the shards are free)."""
    shards = open_shards(
        settings.storage,
        [
            units_spec(make_embedder(settings.embedding).dim),
            views_spec(make_embedder(settings.embedding).dim),
        ],
    )
    try:
        return {
            unit_from_payload(h.payload).turn_id
            for store in all_stores(shards, settings.kafka.topic_partitions)
            for h in scroll_all(store, UNITS)
        }
    finally:
        shards.close()


def machine() -> str:
    """The machine a bench ran on, as the results name it."""
    return (
        f"{platform.machine()} {os.cpu_count()} cpus (shared with other processes), "
        f"{platform.python_implementation()} {platform.python_version()}"
    )


def start_gateway(
    broker: Broker, work: Path, embedder: str = "hash", **overrides: str
) -> tuple[Settings, subprocess.Popen[bytes], Path, int]:
    """:func:`start_up` with its gateway on a free port of 127.0.0.1, :data:`KEY` as the one API key
    (for :data:`TENANT`, a rate limit and a per-key bound that cannot interfere) and ``embedder``,
    once it is ready. Its settings, process, log and gateway port; ``overrides``: more of its
    environment."""
    port = free_port()
    settings, proc, log = start_up(
        broker,
        work,
        MEMSTREAM_GATEWAY_PORT=str(port),
        MEMSTREAM_API_KEYS=json.dumps({KEY: TENANT}),
        MEMSTREAM_RATE_LIMIT_PER_S="100000",
        MEMSTREAM_RATE_LIMIT_BURST="100000",
        MEMSTREAM_GATEWAY_MAX_IN_FLIGHT_PER_KEY="100000",  # one key: the gateway's bound is measured
        MEMSTREAM_EMBEDDER=embedder,
        **overrides,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait(lambda: httpx.get(f"{url}/readyz", timeout=5).status_code == 200, 180, "readiness", proc, log)
    except BaseException:
        stop(proc)
        raise
    return settings, proc, log, port


def preload(
    port: int, turns: list[dict[str, Any]], settings: Settings, proc: subprocess.Popen[bytes], log: Path
) -> int:
    """Post ``turns`` through the gateway on ``port`` in batches and wait until they are stored; how
    many distinct turns that is."""
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60) as c:
        for i in range(0, len(turns), 200):
            resp = c.post("/v1/turns", json={"turns": turns[i : i + 200]})
            if resp.status_code != 202:
                raise SystemExit(f"preload refused: {resp.status_code} {resp.text[:300]}")
    count = len({t["turn_id"] for t in turns})
    wait(lambda: fetch_status(settings)["units_in_store"] >= count, 300, "the preload", proc, log)
    return count

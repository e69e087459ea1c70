"""Shared fixtures: the real Tansu broker for the session, and `memstream up` worker processes."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

import httpx
import pytest
from aiokafka import TopicPartition
from hypothesis import settings as hypothesis_settings

from consumers.extractive import sentences, substantive
from consumers.writer import unit_source
from memstream.adapters.broker import Broker, free_port
from memstream.adapters.kafka import group_offsets
from memstream.adapters.settings import Settings
from memstream.adapters.store import VectorStore, open_shards, scroll_all
from memstream.adapters.store.shards import all_stores
from memstream.core.memories import MEMORIES, memories_spec, memory_from_payload
from memstream.core.unit_views import views_spec
from memstream.core.units import UNITS, unit_from_payload, units_spec
from schemas.events import ConsolidationRequest, Unit, unit_id_for
from schemas.memory import Memory

# Property tests check what holds, not how fast: on a loaded 2-core machine one example can outlast
# Hypothesis's default 200 ms deadline, which fails the test as flaky (seen once in test_rank).
hypothesis_settings.register_profile("memstream", deadline=None)
hypothesis_settings.load_profile("memstream")

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    with Broker(free_port(), log) as b:
        yield b


@dataclass
class Pipeline:
    """A `memstream up` process against the test broker, with its own topics and data dir."""

    settings: Settings
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Pipeline:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memstream.apps.cli", "up"],
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        return self

    def stop(self) -> None:
        if self.proc:
            terminate(self.proc)
        self.proc = None

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A `memstream` command against this pipeline (its environment)."""
        return subprocess.run(
            [sys.executable, "-m", "memstream.apps.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-5000:]

    def problems(self, last: int = 30) -> str:
        """The log's warnings and errors (memstream's and faust's), for a failure message."""
        lines = self.log.read_text(errors="replace").splitlines()
        found = [ln[:300] for ln in lines if re.search(r"WARNING|ERROR|Traceback|Error:", ln)]
        return "\n".join(found[-last:]) or "(no warnings or errors logged)"


def make_pipeline(broker: Broker, tmp: Path, **overrides: str) -> Pipeline:
    run = uuid.uuid4().hex[:8]
    env = {
        **os.environ,
        "MEMSTREAM_BOOTSTRAP_SERVERS": broker.bootstrap,
        "MEMSTREAM_TANSU_QUIRKS": "true",
        "MEMSTREAM_TOPIC_PREFIX": f"t{run}.",
        "MEMSTREAM_APP_ID": f"memstream-test-{run}",
        "MEMSTREAM_DATA_DIR": str(tmp / "data"),
        "MEMSTREAM_METRICS_PORT": str(free_port()),
        # set, not left to `up`: a gateway a test starts beside `up` reads the workers' stores too
        "MEMSTREAM_INTERNAL_TOKEN": f"test-internal-{uuid.uuid4().hex}",
        "MEMSTREAM_GATEWAY_PORT": "0",
        "MEMSTREAM_EMBEDDER": "hash",
        "MEMSTREAM_TOPIC_PARTITIONS": "2",
        "MEMSTREAM_BATCH_WITHIN_S": "0.1",
        "MEMSTREAM_IDLE_CLOSE_S": "3",
        "MEMSTREAM_IDLE_CHECK_INTERVAL_S": "1",
        "MEMSTREAM_DURATIVE_DELAY_S": "1",
        "MEMSTREAM_LOG_LEVEL": "INFO",
        **overrides,
    }
    settings = Settings.from_env(env)
    return Pipeline(settings, env, tmp / "worker.log")


def terminate(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if the process has not stopped within ``timeout``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ready(url: str) -> bool:
    """Whether the gateway at ``url`` answers /readyz with 200."""
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def committed(settings: Settings, topic: str) -> dict[int, int | None]:
    """The pipeline's consumer group's committed offset of each partition of ``topic``."""

    async def read() -> dict[int, int | None]:
        async with group_offsets(settings) as consumer:
            return {
                p: await consumer.committed(TopicPartition(topic, p))
                for p in range(settings.topic_partitions)
            }

    return asyncio.run(read())


def consolidated_units(episode: Memory) -> list[str]:
    """The units an episode consolidated: every turn it covers (its source turns are only those its
    text quotes)."""
    return [unit_id_for(episode.tenant, episode.user_id, t) for t in episode.covers_turn_ids]


def small_talk_only(units: Sequence[Unit]) -> bool:
    """Units that make no memory: nothing said but pleasantries (consumers/recurrence.py)."""
    return not substantive(sentences([unit_source(u) for u in units], UTC))


def small_talk_units(units: Iterable[Unit]) -> set[str]:
    """The ids of the ``units`` of small talk only: no episode covers them, whether their request
    made nothing or a group of them split off at a long gap did (consumers/extractive/episodes.py)."""
    return {u.unit_id for u in units if small_talk_only([u])}


def small_talk_requests(requests: Iterable[ConsolidationRequest], units: Iterable[Unit]) -> set[str]:
    """The ids of the consolidation ``requests`` of small talk only, among the stored ``units``."""
    by_id = {u.unit_id: u for u in units}
    return {r.request_id for r in requests if small_talk_only([by_id[i] for i in r.unit_ids])}


def wait_for(predicate, timeout: float, what: str, poll: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def stored(settings: Settings) -> tuple[list[Unit], list[Memory]]:
    """Every unit and memory in the stores of a stopped pipeline (the shards are free again)."""
    shards = open_shards(
        settings,
        [units_spec(settings.hash_dim), views_spec(settings.hash_dim), memories_spec(settings.hash_dim)],
    )
    try:
        stores = all_stores(shards, settings.topic_partitions)
        units = [unit_from_payload(h.payload) for s in stores for h in scroll_all(s, UNITS)]
        memories = [memory_from_payload(h.payload) for s in stores for h in scroll_all(s, MEMORIES)]
    finally:
        shards.close()
    return units, memories


@pytest.fixture(scope="session")
def sample_memory(tmp_path_factory: pytest.TempPathFactory) -> VectorStore:
    """One store with the sample turns ingested and consolidated (extractive, hash embedder), for
    tests that only read it."""
    from consumers import build_consolidation
    from memstream.adapters.embedders.hashing import HashingEmbedder
    from memstream.adapters.store.shards import EdgeShards
    from tests.test_consolidation import consolidate, ingest

    tmp = tmp_path_factory.mktemp("sample-memory")
    settings = Settings(data_dir=tmp, embedder="hash")
    embedder = HashingEmbedder(settings.hash_dim)
    shards = EdgeShards(
        tmp / "store", [units_spec(embedder.dim), views_spec(embedder.dim), memories_spec(embedder.dim)]
    )
    consolidate(
        build_consolidation(settings, embedder, embedder.default_theta_sim),
        shards.get(0),
        ingest(settings, shards),
    )
    return shards.get(0)

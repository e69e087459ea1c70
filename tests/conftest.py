"""Shared fixtures: a real broker for the session, and `memstream up` worker processes.

The broker is Tansu, or Apache Kafka, or each in turn: ``MEMSTREAM_TEST_BROKERS=tansu,kafka``
(default ``tansu``) runs every test that takes the ``broker`` fixture once per broker named, its id
ending in ``[tansu]`` or ``[kafka]``. Kafka's tests skip where Java or its jars are missing."""

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

from memstream.adapters.broker import Broker, free_port, free_ports
from memstream.adapters.kafka import group_offsets, wait_group_coordinator
from memstream.adapters.kafka_server import KafkaServer, missing
from memstream.adapters.settings import EmbeddingSettings, KafkaSettings, Settings, StorageSettings
from memstream.adapters.store import VectorStore, open_shards, scroll_all
from memstream.adapters.store.shards import all_stores
from memstream.apps.status import fetch_status, worker_ports
from memstream.consumers.extractive import sentences, substantive
from memstream.consumers.writer import unit_source
from memstream.core.memories import MEMORIES, memories_spec, memory_from_payload
from memstream.core.unit_views import views_spec
from memstream.core.units import UNITS, unit_from_payload, units_spec
from memstream.schemas.events import ConsolidationRequest, Unit, unit_id_for
from memstream.schemas.memory import Memory

# Property tests check what holds, not how fast: on a loaded 2-core machine one example can outlast
# Hypothesis's default 200 ms deadline, which fails the test as flaky (seen once in test_rank).
hypothesis_settings.register_profile("memstream", deadline=None)
hypothesis_settings.load_profile("memstream")

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"


# popped: `memstream` warns of a MEMSTREAM_ name that is not a setting, and the tests' subprocesses
# inherit this environment
TEST_BROKERS = os.environ.pop("MEMSTREAM_TEST_BROKERS", "tansu").split(",")
AnyBroker = Broker | KafkaServer
KAFKA_SESSION_TIMEOUT_S = (
    "10"  # as `memstream up` gives its embedded Kafka: a killed worker's partitions wait 10 s
)


# `make test-fast` runs what needs no broker: -m "not integration and not slow and not deploy" (deploy:
# the tools `make deploy-tools` installs, which `make test` runs first). A test is integration
# when it says so, or when it takes the `broker` fixture (directly or through another fixture), which
# pytest_collection_modifyitems marks. One that starts a broker or a pipeline any other way, unmarked,
# fails in a fast run (no_broker_in_a_fast_run) instead of starting one there: it cannot land in the
# fast loop silently.
NEEDS_A_BROKER = {"up", "broker", "demo", "replay"}  # memstream commands that start or reach one


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "broker" in fixtures:
            item.add_marker(pytest.mark.integration)
            # `make test` runs these again on Kafka (MEMSTREAM_TEST_BROKERS=kafka pytest -m on_broker)
            item.add_marker(pytest.mark.on_broker)
        if "helm" in fixtures:  # tests/test_deploy.py: the chart rendered by .venv/bin/helm
            item.add_marker(pytest.mark.deploy)


def starts_a_broker(args: object) -> bool:
    """Whether a command line runs a broker or a memstream command that needs one."""
    argv = [str(a) for a in args] if isinstance(args, list | tuple) else str(args).split()
    names = [Path(a).name for a in argv]
    if "tansu" in names or "kafka.Kafka" in argv:
        return True
    cli = next((i for i, a in enumerate(argv) if a == "memstream.apps.cli" or names[i] == "memstream"), None)
    return cli is not None and bool(NEEDS_A_BROKER & set(argv[cli + 1 : cli + 3]))


class NoBrokerPopen(subprocess.Popen):  # type: ignore[type-arg]
    def __init__(self, args, *rest, **kwargs) -> None:  # type: ignore[no-untyped-def]
        if starts_a_broker(args):
            shown = " ".join(map(str, args)) if isinstance(args, list | tuple) else args
            pytest.fail(f"`{shown}` in a fast run: mark the test integration", pytrace=False)
        super().__init__(args, *rest, **kwargs)


@pytest.fixture(scope="session", autouse=True)
def no_broker_in_a_fast_run(request: pytest.FixtureRequest) -> Iterator[None]:
    if "not integration" not in (request.config.getoption("markexpr") or ""):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess, "Popen", NoBrokerPopen)  # how Broker and KafkaServer start theirs too
        yield


def start_broker(kind: str, tmp: Path) -> AnyBroker:
    """A started Tansu or Kafka on free ports; Kafka with its group coordinator up, so that the
    first test's group join does not meet COORDINATOR_NOT_AVAILABLE for seconds."""
    if kind == "tansu":
        return Broker(free_port(), tmp / "tansu.log").start()
    if missing():
        pytest.skip(f"no Apache Kafka here: {missing()}")
    kafka = KafkaServer(free_port(), free_port(), tmp / "kafka", tmp / "kafka.log").start()
    asyncio.run(wait_group_coordinator(Settings(kafka=KafkaSettings(bootstrap_servers=kafka.bootstrap))))
    return kafka


@pytest.fixture(scope="session", params=TEST_BROKERS)
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnyBroker]:
    b = start_broker(request.param, tmp_path_factory.mktemp(request.param))
    try:
        yield b
    finally:
        b.stop()


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

    def wait(self, predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
        """wait_for, failing at once when `up` has exited, and with the log's problems either way."""

        def running_and() -> object:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"memstream up exited with {self.proc.returncode} before {what}")
            return predicate()

        try:
            return wait_for(running_and, timeout, what)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.problems()}") from None

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-5000:]

    def problems(self, last: int = 30) -> str:
        """The log's warnings and errors (memstream's and faust's), for a failure message."""
        lines = self.log.read_text(errors="replace").splitlines()
        found = [ln[:300] for ln in lines if re.search(r"WARNING|ERROR|Traceback|Error:", ln)]
        return "\n".join(found[-last:]) or "(no warnings or errors logged)"


def each_worker_owns_a_partition(settings: Settings) -> bool:
    """Whether the group has settled on every worker: on Kafka the first worker up takes every
    partition and processes until the next joins, and that rebalance redelivers what it had not
    committed (counted as duplicates); Tansu makes the first join wait, so both join at once."""
    try:
        return all(
            fetch_status(settings.replace(workers=1, metrics_port=port), timeout=5)["partitions"]
            for port in worker_ports(settings)
        )
    except OSError:
        return False


def make_pipeline(broker: AnyBroker, tmp: Path, **overrides: str) -> Pipeline:
    run = uuid.uuid4().hex[:8]
    on_kafka = isinstance(broker, KafkaServer)
    env = {
        **os.environ,
        "MEMSTREAM_BOOTSTRAP_SERVERS": broker.bootstrap,
        "MEMSTREAM_TANSU_QUIRKS": str(not on_kafka).lower(),
        **({"MEMSTREAM_GROUP_SESSION_TIMEOUT_S": KAFKA_SESSION_TIMEOUT_S} if on_kafka else {}),
        "MEMSTREAM_TOPIC_PREFIX": f"t{run}.",
        "MEMSTREAM_APP_ID": f"memstream-test-{run}",
        "MEMSTREAM_DATA_DIR": str(tmp / "data"),
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
    # worker i serves its status on the first port + i: a run of free ports, one a worker
    if "MEMSTREAM_METRICS_PORT" not in overrides:
        env["MEMSTREAM_METRICS_PORT"] = str(free_ports(Settings.from_env(env).worker.workers))
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
                for p in range(settings.kafka.topic_partitions)
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
        settings.storage,
        [
            units_spec(settings.embedding.hash_dim),
            views_spec(settings.embedding.hash_dim),
            memories_spec(settings.embedding.hash_dim),
        ],
    )
    try:
        stores = all_stores(shards, settings.kafka.topic_partitions)
        units = [unit_from_payload(h.payload) for s in stores for h in scroll_all(s, UNITS)]
        memories = [memory_from_payload(h.payload) for s in stores for h in scroll_all(s, MEMORIES)]
    finally:
        shards.close()
    return units, memories


@pytest.fixture(scope="session")
def sample_memory(tmp_path_factory: pytest.TempPathFactory) -> VectorStore:
    """One store with the sample turns ingested and consolidated (extractive, hash embedder), for
    tests that only read it."""
    from memstream.adapters.store.shards import EdgeShards
    from tests.test_consolidation import consolidate, ingest

    tmp = tmp_path_factory.mktemp("sample-memory")
    settings = Settings(storage=StorageSettings(data_dir=tmp), embedding=EmbeddingSettings(embedder="hash"))
    dim = settings.embedding.hash_dim
    shards = EdgeShards(tmp / "store", [units_spec(dim), views_spec(dim), memories_spec(dim)])
    consolidate(ingest(settings, shards))
    return shards.get(0)

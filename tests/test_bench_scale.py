"""bench/scale.py, CI-sized: one size of the ladder through a real broker and `memstream up`
(ingest role, hash embedder), its figures measured, not assumed; on Tansu, and on Apache Kafka in
`make test`'s Kafka pass (MEMSTREAM_TEST_BROKERS=kafka). `python -m bench.scale --users 1000000
--json` is the long run."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness import bench_broker, broker_env
from bench.scale import one_size, sizes, watch_idle_closing
from memstream.adapters.broker import Broker
from memstream.adapters.embedded_broker import BrokerKind
from memstream.adapters.kafka_server import KafkaServer, missing
from tests.conftest import TEST_BROKERS

pytestmark = pytest.mark.integration


def test_the_ladder_goes_up_tenfold_from_1000_and_ends_at_the_size_asked() -> None:
    assert sizes(1_000) == [1_000]
    assert sizes(1_000_000) == [1_000, 10_000, 100_000, 1_000_000]
    assert sizes(25_000) == [1_000, 10_000, 25_000]


def needs(kind: BrokerKind) -> None:
    if kind == "kafka" and missing():
        pytest.skip(f"no Apache Kafka here: {missing()}")


@pytest.mark.on_broker
@pytest.mark.parametrize("kind", TEST_BROKERS)
def test_one_size_ingests_restarts_and_closes_every_users_session(kind: BrokerKind) -> None:
    needs(kind)
    figures = one_size(300, 2, "ingest", deadline=time.monotonic() + 240, broker_kind=kind)
    assert figures["turns"] == 600 and figures["turns_per_s"] > 0
    assert figures["state_bytes"]["window-state"] > 0  # read back from the changelog
    assert figures["state_bytes_per_user"] == round(sum(figures["state_bytes"].values()) / 300, 1)
    assert 0 < figures["rss_anon_mib"] <= figures["rss_mib"]
    # Ready means a turn sent after the restart was stored; every session closed after that.
    assert 0 < figures["restart_to_ready_s"] <= figures["idle_close_all_s"]
    assert figures["idle_closed_per_s"] == pytest.approx(302 / figures["idle_close_all_s"], rel=0.05)


@pytest.mark.on_broker
@pytest.mark.parametrize("kind", TEST_BROKERS)
def test_the_bench_broker_is_the_kind_asked_with_tansus_work_arounds_on_tansu_only(
    kind: BrokerKind, tmp_path: Path
) -> None:
    needs(kind)
    with bench_broker(kind, tmp_path) as broker:
        assert isinstance(broker, KafkaServer if kind == "kafka" else Broker)
        assert broker_env(broker) == {
            "MEMSTREAM_BOOTSTRAP_SERVERS": broker.bootstrap,
            "MEMSTREAM_TANSU_QUIRKS": "true" if kind == "tansu" else "false",
        }
    assert (tmp_path / "broker" / ("kafka.log" if kind == "kafka" else "broker.log")).is_file()


@pytest.fixture
def running() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    yield proc
    proc.kill()
    proc.wait()


def test_idle_closing_watched_until_every_session_closed(running: subprocess.Popen[bytes]) -> None:
    counts = iter([0.0, 40.0, 100.0])
    started = time.monotonic()
    took, rate = watch_idle_closing(lambda: next(counts), 100, started, started + 30, running, Path("log"))
    assert took is not None and 0.9 <= took < 5 and rate == pytest.approx(100 / took)


def test_idle_closing_not_done_in_time_gives_the_rate_so_far(running: subprocess.Popen[bytes]) -> None:
    def flaky() -> float:  # the worker too busy to answer counts as no progress
        if time.monotonic() - started < 0.3:
            raise TimeoutError
        return 50.0

    started = time.monotonic()
    took, rate = watch_idle_closing(flaky, 100, started, started + 1.2, running, Path("log"))
    assert took is None and 50 / 2.5 < rate <= 50 / 1.2  # 0.5 s polls: it stops by 1.7 s


def test_idle_closing_stops_when_the_worker_exits() -> None:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    with pytest.raises(SystemExit, match="exited"):
        watch_idle_closing(lambda: 0.0, 1, time.monotonic(), time.monotonic() + 5, done, Path("log"))

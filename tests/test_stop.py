"""Stopping the embedded default (`memstream up` with its own Tansu broker, whose log is in memory).

* SIGTERM, or Ctrl-C, while 4 clients post turns through the gateway: every turn answered 202 is in
  the store after the stop and recallable after a restart; the gateway answers 503 with Retry-After
  while draining, and reads go on.
* Without a gateway (turns produced straight to the topic): the single worker is drained too; with
  no time to drain the log says how many turns were lost; a second signal ends the wait.
* kill -9 of `up`'s process group: no broker, worker or gateway outlives it, and the next `up` on
  the same data dir starts.
* A broker an earlier run left behind in the data dir is found and stopped by the next `up` (not
  while the process that started it runs); a pidfile naming another process leaves it alone.

The figures are printed (``pytest -s``) and recorded in docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from memstream.adapters.broker import Broker, free_port, stop_leftover
from memstream.adapters.processes import running
from memstream.adapters.settings import Settings
from memstream.apps.sample_conversations import generate
from memstream.apps.status import fetch_status
from memstream.schemas.events import DEFAULT_TENANT, unit_id_for
from tests.conftest import ready, stored, terminate, wait_for
from tests.test_faults import children

pytestmark = pytest.mark.integration


@dataclass
class Up:
    """`memstream up` on the embedded default: its own broker, gateway and data dir."""

    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.env['MEMSTREAM_GATEWAY_PORT']}"

    @property
    def settings(self) -> Settings:
        return Settings.from_env(self.env)

    def start(self) -> Up:
        # Its own session, as a terminal would give it: its process group is `up` alone or with
        # every child, as `up` starts them.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memstream.apps.cli", "up"],
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(lambda: self._alive() and self._ready(), 180, "`up` to be ready")
        return self

    def _ready(self) -> bool:
        if self.env["MEMSTREAM_GATEWAY_PORT"] != "0":
            return ready(self.url)
        try:
            return bool(fetch_status(self.settings, timeout=5))
        except OSError:
            return False

    def _alive(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"memstream up exited with {self.proc.returncode}: {self.logs()}")
        return True

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-5000:]


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_") and not k.startswith("CALF_")
    }
    env.update(
        MEMSTREAM_DATA_DIR=str(tmp_path / "data"),
        MEMSTREAM_EMBEDDED_BROKER_PORT=str(free_port()),
        MEMSTREAM_METRICS_PORT=str(free_port()),
        MEMSTREAM_GATEWAY_PORT=str(free_port()),
        MEMSTREAM_EMBEDDER="hash",
        MEMSTREAM_TOPIC_PARTITIONS="2",
        MEMSTREAM_BATCH_WITHIN_S="0.1",
        MEMSTREAM_RATE_LIMIT_PER_S="10000",
        MEMSTREAM_RATE_LIMIT_BURST="10000",
        MEMSTREAM_LOG_LEVEL="INFO",
        MEMSTREAM_BROKER="tansu",  # the drain is Tansu's; tests/test_kafka_up.py sets kafka
    )
    if "CALF_TANSU_BIN" in os.environ:
        env["CALF_TANSU_BIN"] = os.environ["CALF_TANSU_BIN"]
    u = Up(env, tmp_path / "up.log")
    try:
        yield u
    finally:
        if u.proc:
            terminate(u.proc, timeout=90)


def descendants(pid: int) -> list[int]:
    out = []
    for child in children(pid):
        out += [child, *descendants(child)]
    return out


def turn(i: int, client: int) -> dict[str, object]:
    return {
        "user_id": f"user-{client}",
        "session_id": f"s-{client}",
        "turn_id": f"t-{client}-{i}",
        "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "messages": [
            {
                "speaker": "Ana",
                "role": "user",
                "content": f"Note {i} from client {client}: parcel {i * 7919}.",
            }
        ],
    }


@dataclass(eq=False)  # hashable by identity, as a Thread must be
class Client(threading.Thread):
    """Posts turns one at a time until told to stop or the gateway is gone; records the fate of
    each, and one recall answered while the gateway drained."""

    url: str
    number: int
    accepted: list[str] = field(default_factory=list)
    refused: int = 0
    retry_after: set[str | None] = field(default_factory=set)
    recall_while_draining: int | None = None
    halt: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as c:
            for i in range(100_000):
                if self.halt.is_set():
                    return
                body = turn(i, self.number)
                try:
                    r = c.post("/v1/turns", json=body)
                except httpx.HTTPError:  # the gateway has stopped
                    return
                if r.status_code == 202:
                    self.accepted.append(str(body["turn_id"]))
                elif r.status_code == 503:
                    self.refused += 1
                    self.retry_after.add(r.headers.get("retry-after"))
                    if self.recall_while_draining is None:
                        query = {"user_id": f"user-{self.number}", "query": "parcel"}
                        self.recall_while_draining = c.post("/v1/recall", json=query).status_code
                    time.sleep(0.05)
                else:
                    raise AssertionError(f"unexpected {r.status_code}: {r.text[:300]}")


# SIGTERM to `up` alone (a service manager), SIGINT to its whole process group (Ctrl-C in a terminal).
STOPS = {
    "sigterm": lambda pid: os.kill(pid, signal.SIGTERM),
    "ctrl-c": lambda pid: os.killpg(pid, signal.SIGINT),
}


@pytest.mark.parametrize("stop", STOPS)
def test_a_stop_while_ingesting_keeps_every_accepted_turn(up: Up, stop: str) -> None:
    up.start()
    assert up.proc is not None
    clients = [Client(up.url, n) for n in range(4)]
    for c in clients:
        c.start()
    wait_for(lambda: sum(len(c.accepted) for c in clients) >= 300, 120, "300 turns accepted")
    t_stop = time.monotonic()
    STOPS[stop](up.proc.pid)
    rc = up.proc.wait(timeout=120)
    stop_s = time.monotonic() - t_stop
    for c in clients:
        c.halt.set()
        c.join(30)
    assert rc == 0, up.logs()
    accepted = {(f"user-{c.number}", t) for c in clients for t in c.accepted}
    refused = sum(c.refused for c in clients)

    units, _ = stored(up.settings)
    ids = {u.unit_id for u in units}
    missing = [a for a in accepted if unit_id_for(DEFAULT_TENANT, *a) not in ids]
    print(
        f"\n{stop} while ingesting: {len(accepted)} accepted (202), {refused} refused (503) while "
        f"draining, {len(accepted) - len(missing)} of them stored; stop took {stop_s:.1f}s"
    )
    assert not missing, f"{len(missing)} of {len(accepted)} accepted turns not stored: {missing[:5]}"
    assert "every accepted turn stored after" in up.log.read_text()
    assert refused > 0, "no 503 while draining"
    assert set().union(*(c.retry_after for c in clients)) == {"5"}, "a 503 without Retry-After"
    # Reads go on while turns are refused (a recall that lands after the workers stopped is a 503).
    assert 200 in {c.recall_while_draining for c in clients}, "no recall answered while draining"

    # After a restart the units are recalled: the store on disk is what the new pipeline reads.
    up.start()
    with httpx.Client(base_url=up.url, timeout=30) as c:
        for client in clients:
            r = c.post("/v1/recall", json={"user_id": f"user-{client.number}", "query": "parcel note"})
            assert r.status_code == 200, r.text
            found = {t for item in r.json()["items"] for t in item["source_turn_ids"]}
            assert found and found <= set(client.accepted), r.text


@pytest.mark.parametrize("case", ["drained", "no time", "second signal"])
def test_without_a_gateway_the_stop_drains_what_was_produced_within_the_bound(up: Up, case: str) -> None:
    """One worker and no gateway (turns produced straight to the topic) also run under the
    supervisor, which drains; with no time to drain, the log says how many turns were lost; a
    second signal ends the wait at once."""
    up.env.update(MEMSTREAM_GATEWAY_PORT="0", MEMSTREAM_STOP_DRAIN_S="0" if case == "no time" else "30")
    up.start()
    assert up.proc is not None
    sample = up.log.parent / "sample.jsonl"
    sample.write_bytes(b"".join(t.to_bytes() + b"\n" for t in generate(users=3, days=60, seed=3)))
    total = len(sample.read_bytes().splitlines())
    client = {
        **up.env,
        "MEMSTREAM_BOOTSTRAP_SERVERS": f"127.0.0.1:{up.env['MEMSTREAM_EMBEDDED_BROKER_PORT']}",
        "MEMSTREAM_TANSU_QUIRKS": "true",
    }
    replayed = subprocess.run(
        [sys.executable, "-m", "memstream.apps.cli", "replay", str(sample)], env=client, timeout=120
    )
    assert replayed.returncode == 0
    os.kill(up.proc.pid, signal.SIGTERM)
    if case == "second signal":
        wait_for(lambda: "stopping: storing" in up.log.read_text(), 10, "the drain to start", poll=0.05)
        os.kill(up.proc.pid, signal.SIGINT)
        t_second = time.monotonic()
    assert up.proc.wait(timeout=120) == 0, up.logs()
    stored_now = len(stored(up.settings)[0])
    lost = re.search(r"with (\d+) accepted turns not stored", up.log.read_text())
    print(f"\nno gateway, {case}: {stored_now} of {total} stored; {lost and lost[0]}")
    if case == "no time":
        assert lost is not None and int(lost[1]) > 0, up.logs()
        assert stored_now + int(lost[1]) >= total  # the worker went on storing until it stopped
    elif case == "second signal":
        assert "a second signal ended the wait" in up.log.read_text()
        assert time.monotonic() - t_second < 20  # the workers' own stop, not the 30 s bound
    else:
        assert lost is None and stored_now == total, up.logs()


def test_kill_9_of_the_process_group_leaves_nothing_running(up: Up) -> None:
    up.start()
    assert up.proc is not None
    spawned = descendants(up.proc.pid)
    pidfile = Path(up.env["MEMSTREAM_DATA_DIR"]) / "broker.pid"
    broker_pid = json.loads(pidfile.read_text())["pid"]
    assert broker_pid in spawned and len(spawned) >= 3, spawned  # broker, worker, gateway
    os.killpg(up.proc.pid, signal.SIGKILL)
    up.proc.wait(timeout=10)
    wait_for(lambda: not [p for p in spawned if running(p)], 15, "every child to die", poll=0.1)
    print(f"\nkill -9 of the process group: {len(spawned)} children, none running after it")

    up.proc = None
    up.start()  # the same data dir and ports
    assert json.loads(pidfile.read_text())["pid"] != broker_pid


def test_a_broker_left_behind_in_the_data_dir_is_stopped(up: Up, tmp_path: Path) -> None:
    data = Path(up.env["MEMSTREAM_DATA_DIR"])
    data.mkdir(parents=True)
    port = int(up.env["MEMSTREAM_EMBEDDED_BROKER_PORT"])
    leftover = Broker(port, tmp_path / "leftover.log", data / "broker.pid").start()
    proc = leftover.proc
    assert proc is not None
    leftover.proc = None  # forgotten by its starter, as by a killed `up`: only the pidfile knows it
    pidfile = data / "broker.pid"
    record = json.loads(pidfile.read_text())
    assert record["owner"] == os.getpid()
    # While its starter runs, it is another `up`'s broker: left alone, and this `up` fails on the port.
    refused = subprocess.run(
        [sys.executable, "-m", "memstream.apps.cli", "up"], env=up.env, capture_output=True, timeout=60
    )
    assert refused.returncode == 1 and b"already in use" in refused.stderr, refused.stderr[-2000:]
    assert b"Traceback" not in refused.stderr
    assert proc.poll() is None
    # Its starter gone (a pid that has exited), it is a leftover.
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    pidfile.write_text(json.dumps({**record, "owner": int(gone.stdout)}))
    up.start()  # would fail on "port already in use" if the leftover still held it
    assert proc.wait(timeout=10) is not None
    assert f"stopped Tansu pid {proc.pid}" in up.log.read_text()


def test_a_pidfile_naming_another_process_leaves_it_alone(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pidfile = tmp_path / "broker.pid"
        pidfile.write_text(json.dumps({"pid": other.pid, "port": free_port()}))
        assert stop_leftover(pidfile) is None
        assert other.poll() is None and not pidfile.exists()
        pidfile.write_text("not json")
        assert stop_leftover(pidfile) is None and not pidfile.exists()
    finally:
        other.kill()
        other.wait()

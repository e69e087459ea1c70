"""`memstream up` on the embedded Apache Kafka (MEMSTREAM_BROKER=kafka, issue 28): its log in the
data dir, so a turn answered 202 outlives kill -9 of everything.

* kill -9 of `up`'s whole process group while 4 clients post turns through the gateway: nothing
  (Kafka's JVM included) outlives it; `up` restarted on the same data dir goes on from the committed
  offsets, and every turn answered 202 is stored exactly once with the content hash the gateway
  answered, found by GET /v1/users/{id}/turns/{turn_id}.
* A Kafka an earlier run left behind in the data dir (its starter gone) is stopped by the next start.
* Kafka asked for where it cannot start: a clear error naming `make kafka`, no traceback.

The figures are printed (``pytest -s``) and recorded in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from memstream.adapters.broker import free_port
from memstream.adapters.kafka import unconsumed
from memstream.adapters.kafka_server import KafkaServer, is_kafka, missing
from memstream.adapters.processes import running
from memstream.apps.status import settled
from memstream.schemas.events import DEFAULT_TENANT, unit_id_for
from tests import test_stop
from tests.conftest import stored, wait_for
from tests.test_stop import Up, descendants, turn

up = test_stop.up  # the fixture: `memstream up` on its own data dir and ports

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(missing() is not None, reason=f"no Apache Kafka here: {missing()}"),
]


@dataclass(eq=False)  # hashable by identity, as a Thread must be
class Poster(threading.Thread):
    """Posts turns one at a time until the gateway is gone; the content hash answered for each
    turn accepted (202), and every turn id posted whatever became of it."""

    url: str
    number: int
    accepted: dict[str, str] = field(default_factory=dict)
    posted: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as c:
            for i in range(100_000):
                body = turn(i, self.number)
                self.posted.add(str(body["turn_id"]))
                try:
                    r = c.post("/v1/turns", json=body)
                except httpx.HTTPError:  # the gateway was killed
                    return
                if r.status_code != 202:
                    raise AssertionError(f"unexpected {r.status_code}: {r.text[:300]}")
                self.accepted[str(body["turn_id"])] = r.json()["content_hashes"][0]


def rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def on_kafka(up: Up) -> Up:
    up.env["MEMSTREAM_BROKER"] = "kafka"
    return up


def test_kill_9_of_everything_keeps_every_accepted_turn_once(up: Up) -> None:
    on_kafka(up).start()
    assert up.proc is not None
    clients = [Poster(up.url, n) for n in range(4)]
    for c in clients:
        c.start()
    wait_for(lambda: sum(len(c.accepted) for c in clients) >= 300, 120, "300 turns accepted")
    spawned = descendants(up.proc.pid)
    os.killpg(up.proc.pid, signal.SIGKILL)
    up.proc.wait(timeout=10)
    for c in clients:
        c.join(30)
    wait_for(lambda: not [p for p in spawned if running(p)], 15, "every child to die", poll=0.1)
    accepted = {(f"user-{c.number}", t): h for c in clients for t, h in c.accepted.items()}
    posted = {(f"user-{c.number}", t) for c in clients for t in c.posted}

    up.proc = None
    t_restart = time.monotonic()
    up.start()  # the same data dir and ports: Kafka's log and the group's committed offsets
    ready_s = time.monotonic() - t_restart
    client = up.settings.replace(bootstrap_servers=f"127.0.0.1:{up.env['MEMSTREAM_EMBEDDED_BROKER_PORT']}")
    turns = client.kafka.topic("turns")
    wait_for(lambda: asyncio.run(unconsumed(client, turns)) == 0, 120, "the turns topic to be consumed")
    wait_for(lambda: asyncio.run(settled(client)), 120, "consolidation to settle")
    settled_s = time.monotonic() - t_restart
    with httpx.Client(base_url=up.url, timeout=30) as c:
        hashes = {(user, t): c.get(f"/v1/users/{user}/turns/{t}") for user, t in accepted}
    not_found = [k for k, r in hashes.items() if r.status_code != 200]
    assert not not_found, f"{len(not_found)} of {len(accepted)} accepted turns not found: {not_found[:5]}"
    wrong = [k for k, r in hashes.items() if r.json()["content_hash"] != accepted[k]]
    assert not wrong, wrong[:5]

    kafka_pid = json.loads((Path(up.env["MEMSTREAM_DATA_DIR"]) / "kafka.pid").read_text())["pid"]
    rss_mb = rss_kb(kafka_pid) / 1024
    t_stop = time.monotonic()
    os.kill(up.proc.pid, signal.SIGTERM)
    assert up.proc.wait(timeout=120) == 0, up.logs()
    stop_s = time.monotonic() - t_stop
    up.proc = None
    units, _ = stored(up.settings)
    copies = Counter((u.user_id, u.turn_id) for u in units)
    print(
        f"\nkafka, kill -9 of {len(spawned)} children while ingesting: {len(accepted)} accepted (202), "
        f"{len(posted)} posted; after the restart {sum(1 for k in accepted if copies[k] == 1)} accepted "
        f"stored once, {len(units)} units in all; ready {ready_s:.1f}s and settled {settled_s:.1f}s "
        f"after the restart; Kafka's RSS {rss_mb:.0f} MB; SIGTERM stopped `up` in {stop_s:.1f}s"
    )
    assert all(copies[k] == 1 for k in accepted), [k for k in accepted if copies[k] != 1][:5]
    assert set(copies) <= posted and max(copies.values()) == 1  # nothing invented, nothing twice
    assert {u.unit_id for u in units} >= {unit_id_for(DEFAULT_TENANT, *k) for k in accepted}


def test_a_kafka_left_behind_in_the_data_dir_is_stopped(tmp_path: Path) -> None:
    pidfile = tmp_path / "kafka.pid"
    first = KafkaServer(free_port(), free_port(), tmp_path / "kafka", tmp_path / "first.log", pidfile=pidfile)
    first.start()
    proc = first.proc
    assert proc is not None and is_kafka(proc.pid, first.properties)
    first.proc = None  # forgotten by its starter, as by a killed `up`: only the pidfile knows it
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    pidfile.write_text(json.dumps({**json.loads(pidfile.read_text()), "owner": int(gone.stdout)}))
    # The same data dir, new ports: it would fail on the log dir's lock if the leftover still ran.
    with KafkaServer(
        free_port(), free_port(), tmp_path / "kafka", tmp_path / "second.log", pidfile=pidfile
    ) as k:
        assert proc.poll() is not None
        assert k.proc is not None and json.loads(pidfile.read_text())["pid"] == k.proc.pid
    assert not pidfile.exists()


def test_kafka_asked_for_without_its_jars_is_a_clear_error(up: Up, tmp_path: Path) -> None:
    env = {**on_kafka(up).env, "MEMSTREAM_KAFKA_LIBS": str(tmp_path / "nowhere")}
    done = subprocess.run(
        [sys.executable, "-m", "memstream.apps.cli", "up"], env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 1
    assert b"run `make kafka`" in done.stderr and b"Traceback" not in done.stderr, done.stderr[-2000:]

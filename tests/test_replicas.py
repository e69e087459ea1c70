"""Two replicas of every role give the same memory as one, also when one worker is killed.

The same turns go through two deployments against the real Tansu broker, each in its own topics,
consumer group and data dir:

* one: one `memstream up` worker (every role) and its gateway;
* two: two `memstream up` processes of one worker each (every role; one consumer group, so they
  share the partitions like two pods of each role) and two `memstream gateway` replicas. Batches
  alternate between the gateways. In the second test, halfway through, one worker is killed with
  SIGKILL and not restarted: the survivor takes its partitions.

Batches are posted one after another (each acknowledged before the next), so every user's turns
keep their order in both deployments. The users a librdkafka-like producer would misplace are
produced that way, straight to Kafka, and reach their memory through the workers' forwarding.
The idle timer is set long enough not to fire: windows closing on the wall clock would make the
outcome depend on timing rather than on the turns.
Compared: every unit, every memory (whole records; ids are deterministic), and recall answers
for each user through every gateway; after the kill, units and the consolidation requests folded
into episodes (each exactly once).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from memstream.adapters.broker import Broker, free_port
from memstream.adapters.kafka import partition_for, settled
from memstream.adapters.settings import Settings
from memstream.apps.sample_conversations import generate
from memstream.apps.status import fetch_status
from memstream.schemas.events import Turn
from memstream.schemas.memory import Memory, MemoryKind
from tests.conftest import Pipeline, consolidated_units, make_pipeline, ready, stored, terminate, wait_for
from tests.partitioners import librdkafka_consistent, produce
from tests.test_faults import children

pytestmark = pytest.mark.integration

KEY = "replica-test-key-0123456789"
TENANT = "demo"
TURNS = [orjson.loads(t.model_dump_json(exclude={"tenant"})) for t in generate(users=6, days=30, seed=11)]
BATCH = 40
QUERIES = ["What do I like to do?", "What happened last week?", "Where did I travel?"]
NOW = "2025-02-10T12:00:00Z"
Recalls = dict[tuple[str, str], list[dict[str, Any]]]  # (user, query) -> items


@dataclass
class Outcome:
    units: dict[str, dict[str, Any]]
    memories: dict[str, dict[str, Any]]
    recalls: list[Recalls]  # one per gateway
    seconds: float


def overrides(gateway_port: int) -> dict[str, str]:
    return {
        "MEMSTREAM_WORKERS": "1",
        "MEMSTREAM_GATEWAY_PORT": str(gateway_port),
        "MEMSTREAM_API_KEYS": orjson.dumps({KEY: TENANT}).decode(),
        "MEMSTREAM_RATE_LIMIT_PER_S": "1000",
        "MEMSTREAM_RATE_LIMIT_BURST": "1000",
        "MEMSTREAM_IDLE_CLOSE_S": "3600",
    }


@contextmanager
def gateway(env: dict[str, str], log: Path) -> Iterator[str]:
    """A `memstream gateway` replica on a free port; its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memstream.apps.cli", "gateway", "--port", str(port)],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        terminate(proc)


def strays(partitions: int) -> set[str]:
    """Users that a librdkafka-like producer (CRC32) puts on a partition other than their key's."""
    everything = list(range(partitions))
    keys = {t["user_id"]: f"{TENANT}/{t['user_id']}".encode() for t in TURNS}
    return {
        u
        for u, k in keys.items()
        if librdkafka_consistent(k, everything, everything) != partition_for(k, partitions)
    }


def post_all(settings: Settings, urls: list[str], halfway: Any = None) -> None:
    """Every turn, in batches alternating between the gateways; ``halfway()`` between the halves.
    The stray users' turns go straight to Kafka from a librdkafka-like producer instead (forwarded
    to their key's partition by the workers); each user's turns take one path, in order."""
    batches = [TURNS[i : i + BATCH] for i in range(0, len(TURNS), BATCH)]
    headers = {"Authorization": f"Bearer {KEY}"}
    away = strays(settings.kafka.topic_partitions)
    assert away, "some users must be misplaced by the CRC32 producer"
    with httpx.Client(timeout=60, headers=headers) as client:
        for i, batch in enumerate(batches):
            if i == len(batches) // 2 and halfway:
                halfway()
            direct = [Turn.model_validate({**t, "tenant": TENANT}) for t in batch if t["user_id"] in away]
            asyncio.run(produce(settings, direct, librdkafka_consistent))
            url = urls[i % len(urls)]
            r = client.post(f"{url}/v1/turns", json={"turns": [t for t in batch if t["user_id"] not in away]})
            assert r.status_code == 202, r.text


def recall(url: str) -> Recalls:
    users = sorted({t["user_id"] for t in TURNS})
    with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {KEY}"}) as client:
        out = {}
        for user in users:
            for query in QUERIES:
                r = client.post(f"{url}/v1/recall", json={"user_id": user, "query": query, "now": NOW})
                assert r.status_code == 200, r.text
                out[(user, query)] = r.json()["items"]
        return out


def settle(*workers: Settings) -> None:
    """Every turn stored (the workers' /status), then every topic after ingest consumed."""

    def units() -> int:
        try:
            return sum(int(fetch_status(w, timeout=5)["units_in_store"]) for w in workers)
        except OSError:
            return -1

    wait_for(lambda: units() == len(TURNS), 90, "every turn to be stored")
    wait_for(lambda: asyncio.run(settled(workers[0])), 90, "consolidation to settle")


def outcome(settings: Settings, recalls: list[Recalls], t0: float) -> Outcome:
    units, memories = stored(settings)
    return Outcome(
        units={u.unit_id: u.model_dump() for u in units},
        memories={m.memory_id: m.model_dump() for m in memories},
        recalls=recalls,
        seconds=time.monotonic() - t0,
    )


def run_one(broker: Broker, tmp: Path) -> Outcome:
    t0 = time.monotonic()
    port = free_port()
    pipeline = make_pipeline(broker, tmp, **overrides(port)).start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: ready(url), 120, "the gateway to be ready")
        post_all(pipeline.settings, [url])
        settle(pipeline.settings)
        recalls = [recall(url)]
    finally:
        pipeline.stop()
    return outcome(pipeline.settings, recalls, t0)


def run_two(
    broker: Broker, tmp: Path, kill: bool, table_store: str = "memory"
) -> tuple[Outcome, dict[str, Any]]:
    t0 = time.monotonic()
    base = make_pipeline(broker, tmp, **overrides(0), MEMSTREAM_TABLE_STORE=table_store)
    ports = [free_port(), free_port()]
    envs = [{**base.env, "MEMSTREAM_METRICS_PORT": str(p)} for p in ports]
    workers = [Pipeline(Settings.from_env(e), e, tmp / f"worker-{i}.log") for i, e in enumerate(envs)]
    gateway_env = {**base.env, "MEMSTREAM_WORKER_URLS": ",".join(f"http://127.0.0.1:{p}" for p in ports)}
    facts: dict[str, Any] = {}
    with ExitStack() as stack:
        for w in workers:
            stack.callback(w.stop)
            w.start()
        urls = [stack.enter_context(gateway(gateway_env, tmp / f"gateway-{i}.log")) for i in range(2)]
        wait_for(lambda: all(ready(u) for u in urls), 180, "both gateways to be ready")
        wait_for(
            lambda: all(fetch_status(w.settings, timeout=5)["partitions"] for w in workers),
            60,
            "each worker to hold a partition",
        )

        def kill_one() -> None:
            victim = workers[0]
            assert victim.proc is not None
            # Mid-work, not before it began: its ingest, consolidation and index are under way.
            facts["stored_at_kill"] = wait_for(
                lambda: (n := fetch_status(victim.settings)["units_in_store"]) >= 60 and n,
                60,
                "the worker to be killed to store some of the turns",
            )
            # One worker and no gateway: `memstream up` is the worker itself, no supervisor.
            assert not children(victim.proc.pid)
            victim.proc.send_signal(signal.SIGKILL)
            facts["exit"] = victim.proc.wait(timeout=60)
            facts["t_kill"] = time.monotonic()

        post_all(base.settings, urls, halfway=kill_one if kill else None)
        survivor = workers[1]
        settle(*[w.settings for w in (workers[1:] if kill else workers)])
        facts["settled_s"] = time.monotonic() - facts.pop("t_kill", t0)
        facts["survivor_partitions"] = fetch_status(survivor.settings)["partitions"]
        wait_for(lambda: all(ready(u) for u in urls), 60, "both gateways to be ready again")
        recalls = [recall(u) for u in urls]
    return outcome(base.settings, recalls, t0), facts


@pytest.fixture(scope="module")
def one(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    return run_one(broker, tmp_path_factory.mktemp("one"))


def differences(one: Outcome, two: Outcome) -> str:
    differing = [k for k in one.memories.keys() & two.memories.keys() if one.memories[k] != two.memories[k]]
    only_one = one.memories.keys() - two.memories.keys()
    only_two = two.memories.keys() - one.memories.keys()

    def kinds(ids: Any, out: Outcome) -> dict[str, int]:
        return dict(Counter(str(out.memories[i]["kind"]) for i in ids))

    fields = Counter(
        f for k in differing for f in one.memories[k] if one.memories[k][f] != two.memories[k][f]
    )
    return (
        f"{len(two.units)} units, {len(two.memories)} memories (one worker: {len(one.units)}, "
        f"{len(one.memories)}); memories only in one {len(only_one)} {kinds(only_one, one)}, "
        f"only in two {len(only_two)} {kinds(only_two, two)}, differing {len(differing)} "
        f"{kinds(differing, one)} in {dict(fields)}"
        + "".join(turns_apart(one.memories[k], two.memories[k]) for k in differing)
    )


def turns_apart(a: dict[str, Any], b: dict[str, Any]) -> str:
    """A memory built from other turns in the two deployments: which."""
    one, two = set(a["source_turn_ids"]), set(b["source_turn_ids"])
    if one == two:
        return ""
    return (
        f"\n  {a['kind']} {a['start']}: children {len(a['children'])} vs {len(b['children'])}, "
        f"turns only in one {sorted(one - two)[:6]}, only in two {sorted(two - one)[:6]}"
    )


def in_episodes(out: Outcome, what: str) -> list[str]:
    """The request ids (``what="requests"``) or unit ids (``"units"``) episodes consolidated, one entry
    per episode naming it (a request may be split into up to 3 episodes at long gaps; a unit is in
    one episode at most)."""
    episodes = [Memory.model_validate(m) for m in out.memories.values() if m["kind"] == MemoryKind.EPISODE]
    return sorted(
        i for m in episodes for i in (m.request_ids if what == "requests" else consolidated_units(m))
    )


def test_two_replicas_of_every_role_give_the_same_memory_and_answers_as_one(
    broker: Broker, tmp_path: Path, one: Outcome
) -> None:
    two, facts = run_two(broker, tmp_path, kill=False)
    print(f"\nreplicas: {len(TURNS)} turns; two of each, {two.seconds:.0f}s: {differences(one, two)}")
    assert facts["survivor_partitions"] in ([0], [1])  # each worker holds one partition
    assert len(one.units) == len(TURNS)
    assert two.units == one.units
    assert one.memories and two.memories == one.memories
    assert all(r == one.recalls[0] for r in two.recalls)


@pytest.mark.parametrize("table_store", ["memory", "rocksdb"])
def test_with_one_worker_killed_the_survivor_loses_and_doubles_nothing(
    broker: Broker, tmp_path: Path, one: Outcome, table_store: str
) -> None:
    """The survivor takes the killed worker's partitions and redelivered work is recognised: every
    turn stored once, the same requests consolidated, no unit in two episodes.
    Tree nodes may differ a little from one worker's: work redelivered or handed on during the
    rebalance reaches the summarizer later, so a session may be summarised under a later day.
    With ``rocksdb`` the two workers, started by hand on one data dir, each take a table directory
    of their own (the second finds the first's held); the survivor reads the killed worker's
    partition into its own."""
    two, facts = run_two(broker, tmp_path, kill=True, table_store=table_store)
    print(
        f"\nreplicas, one worker killed at {facts['stored_at_kill']} of its units stored: survivor "
        f"held {facts['survivor_partitions']}, settled {facts['settled_s']:.1f}s after the kill, "
        f"{two.seconds:.0f}s: {differences(one, two)}"
    )
    assert facts["exit"] == -signal.SIGKILL
    assert facts["survivor_partitions"] == [0, 1]
    assert two.units == one.units  # every turn stored exactly once
    # The same consolidation requests folded in as one worker's; no unit in two episodes.
    assert set(in_episodes(two, "requests")) == set(in_episodes(one, "requests"))
    units = in_episodes(two, "units")
    assert units == sorted(set(units)) and set(units) == set(in_episodes(one, "units"))
    assert two.recalls[0] == two.recalls[1]  # both gateways read the same memory
    if table_store == "rocksdb":
        faust_dir = tmp_path / "data" / "faust"
        held = {
            d.name: sorted(p.name for p in d.glob("v*/tables/*.db"))
            for d in faust_dir.glob("worker-*")
            if d.is_dir()
        }
        assert sorted(held) == ["worker-0", "worker-1"], held
        # The survivor holds both partitions of the window state in its own directory.
        assert any({"window-state-0.db", "window-state-1.db"} <= set(dbs) for dbs in held.values()), held

"""Table state on disk (streams/table_store.py): the faust settings each MEMSTREAM_TABLE_STORE gives,
the RocksDB store filing every key under its user's partition (also outside any event, as the idle
timer writes), and the worker directories, each held by one process and free again when it dies.
The pipeline with RocksDB against the real broker: tests/test_faults.py and tests/test_replicas.py."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import faust
import pytest
from faust.types import TP

from memstream.adapters.kafka import partition_for
from memstream.adapters.settings import (
    GatewaySettings,
    KafkaSettings,
    Settings,
    StorageSettings,
    WorkerSettings,
)
from memstream.streams.faust_adapter import faust_settings
from memstream.streams.table_store import (
    ChangelogRecovery,
    UserStore,
    claim_worker_dir,
    use_changelog_recovery,
)


def test_the_faust_settings_carry_the_store_its_directory_and_the_standby_replicas(tmp_path: Path) -> None:
    default = faust_settings(Settings(storage=StorageSettings(data_dir=tmp_path)))
    assert default["store"] == "memstream-rocksdb://"
    assert default["datadir"] == str(tmp_path / "faust" / "worker-0")
    assert default["table_standby_replicas"] == 1  # faust's default
    memory = faust_settings(Settings(storage=StorageSettings(data_dir=tmp_path, table_store="memory")))
    assert memory["store"] == "memory://"
    assert memory["datadir"] == str(tmp_path / "faust")

    rocks = faust_settings(
        Settings.from_env(
            {
                "MEMSTREAM_DATA_DIR": str(tmp_path),
                "MEMSTREAM_TABLE_STORE": "rocksdb",
                "MEMSTREAM_TABLE_STANDBY_REPLICAS": "0",
                "MEMSTREAM_WORKER_INDEX": "2",
            }
        )
    )
    assert rocks["store"] == "memstream-rocksdb://"
    assert rocks["datadir"] == str(tmp_path / "faust" / "worker-2")  # each worker its own
    assert rocks["table_standby_replicas"] == 0

    with pytest.raises(ValueError):
        Settings(storage=StorageSettings(table_store="lmdb"))  # type: ignore[arg-type]


def test_the_app_takes_the_store_from_the_url(tmp_path: Path) -> None:
    settings = Settings(
        storage=StorageSettings(data_dir=tmp_path, table_store="rocksdb"),
        kafka=KafkaSettings(topic_partitions=4),
    )
    app = faust.App("table-store-test", **faust_settings(settings))
    assert app.conf.table_standby_replicas == 1
    table = app.Table("window-state", default=None, partitions=4, key_type=bytes, use_partitioner=True)
    assert isinstance(table.data, UserStore)
    assert str(app.conf.tabledir).startswith(str(tmp_path / "faust" / "worker-0"))


def test_every_key_is_filed_under_its_users_partition_outside_any_event(tmp_path: Path) -> None:
    """faust's own store takes the partition of the event being processed and refuses a write
    outside one; the idle timer writes outside any, and an ingest batch mixes partitions."""
    settings = Settings(
        storage=StorageSettings(data_dir=tmp_path, table_store="rocksdb"),
        kafka=KafkaSettings(topic_partitions=4),
    )
    app = faust.App("table-store-test", **faust_settings(settings))
    table = app.Table("window-state", default=None, partitions=4, key_type=bytes, use_partitioner=True)
    store = table.data
    keys = [f"demo/user-{i}".encode() for i in range(40)]
    for k in keys:
        store[k] = {"user": k.decode()}  # no current event
    filed = {p: set(store._visible_keys(db)) for p, db in store._dbs.items()}
    assert {k: p for p, ks in filed.items() for k in ks} == {k: partition_for(k, 4) for k in keys}
    assert len(filed) == 4
    # What the table's update (the handlers' ``states.update``) ends in, after its changelog sends.
    store.update({keys[0]: {"user": "again"}, keys[1]: {"user": "once more"}})
    assert store[keys[0]] == {"user": "again"} and store[keys[1]] == {"user": "once more"}
    assert store[keys[7]] == {"user": "demo/user-7"}
    assert keys[7] in store and b"demo/nobody" not in store
    del store[keys[7]]
    assert keys[7] not in store
    assert store.get(keys[7]) is None
    # A partition whose database this worker does not have open holds nothing for it.
    gone = partition_for(keys[8], 4)
    store._dbs.pop(gone)
    assert keys[8] not in store


def test_a_partition_ahead_of_its_changelog_is_emptied_rather_than_fatal(tmp_path: Path) -> None:
    """The broker came back without the changelog (or the topic was made again): the database of
    that partition is deleted and opens empty with no offset, so recovery reads the changelog from
    its start instead of faust raising ConsistencyError at every start. The app uses this recovery."""
    settings = Settings(
        storage=StorageSettings(data_dir=tmp_path, table_store="rocksdb"),
        kafka=KafkaSettings(topic_partitions=2),
    )
    app = faust.App("table-store-test", **faust_settings(settings))
    use_changelog_recovery(app)  # as memstream.streams.worker does
    assert isinstance(app.tables.recovery, ChangelogRecovery)
    table = app.Table("window-state", default=None, partitions=2, key_type=bytes, use_partitioner=True)
    store = table.data
    keys = [f"demo/user-{i}".encode() for i in range(20)]
    for k in keys:
        store[k] = {"user": k.decode()}
    tp = TP(table.changelog_topic.get_topic_name(), 0)
    store.set_persisted_offset(tp, 41)
    recovery = app.tables.recovery
    recovery.add_active(table, tp)
    recovery.active_highwaters[tp] = -1  # an empty changelog

    class Earliest:
        async def earliest_offsets(self, *tps: TP) -> dict[TP, int | None]:
            return dict.fromkeys(tps)

    asyncio.run(recovery._build_offsets(Earliest(), {tp}, recovery.active_offsets, "active"))  # type: ignore[arg-type]
    assert recovery.active_offsets[tp] == -1  # read from the start, no ConsistencyError
    assert store.persisted_offset(tp) is None
    assert [k for k in keys if k in store] == [k for k in keys if partition_for(k, 2) == 1]
    # A partition within its changelog keeps its database and its offset.
    other = TP(tp.topic, 1)
    store.set_persisted_offset(other, 5)
    recovery.add_active(table, other)
    recovery.active_highwaters[other] = 9
    asyncio.run(recovery._build_offsets(Earliest(), {other}, recovery.active_offsets, "active"))  # type: ignore[arg-type]
    assert recovery.active_offsets[other] == 5 and store.persisted_offset(other) == 5


HOLD = """
import sys, time
from pathlib import Path
from memstream.streams.table_store import claim_worker_dir
claimed = claim_worker_dir(Path(sys.argv[1]), int(sys.argv[2]))
print(claimed.index, flush=True)
time.sleep(600)
"""


def test_each_worker_holds_its_own_directory_until_it_dies(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path), "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "0"
        # Another process asking for 0 (two `memstream up` by hand on one data dir) gets the next.
        other = claim_worker_dir(tmp_path, 0)
        assert other.index == 1 and other.path == tmp_path / "faust" / "worker-1" and other.path.is_dir()
        third = claim_worker_dir(tmp_path, 1)
        assert third.index == 2  # 1 is held by `other`
        third.release()
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        # Killed, it holds nothing: restarted, the worker finds its own directory again.
        again = claim_worker_dir(tmp_path, 0)
        assert again.index == 0
        again.release()
        other.release()
        last = claim_worker_dir(tmp_path, 1)
        assert last.index == 1
        last.release()
    finally:
        holder.kill()
        holder.wait()


def test_up_gives_each_worker_its_index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`memstream up --workers N` starts worker i with MEMSTREAM_WORKER_INDEX=i: after a restart of
    `up`, worker i takes the directory it had."""
    from memstream.apps import runtime

    envs: list[dict[str, str]] = []

    class Exited:
        pid = 0
        returncode = 0

        def __init__(self, args: list[str], env: dict[str, str], **_: object) -> None:
            envs.append(env)

        def poll(self) -> int:
            return 0

        def wait(self, timeout: float | None = None) -> int:
            return 0

    monkeypatch.setattr(runtime.subprocess, "Popen", Exited)
    settings = Settings(
        storage=StorageSettings(data_dir=tmp_path, table_store="rocksdb"),
        worker=WorkerSettings(workers=3),
        kafka=KafkaSettings(topic_partitions=4),
        gateway=GatewaySettings(gateway_port=0),
    )
    assert runtime.run_workers(settings) == 0
    assert [e["MEMSTREAM_WORKER_INDEX"] for e in envs] == ["0", "1", "2"]


def test_a_worker_directory_unused_for_longer_than_the_tombstones_live_is_emptied(tmp_path: Path) -> None:
    """A directory kept past the changelogs' tombstone retention would hold users erased while it was
    away: claimed after ``stale_after_s`` unused, it starts empty and reads the changelogs."""
    first = claim_worker_dir(tmp_path, 0, stale_after_s=3600)
    (first.path / "window-state-0.db").write_text("state")
    first.release()
    now = time.time()

    # Back within the hour: the state is kept.
    again = claim_worker_dir(tmp_path, 0, stale_after_s=3600, clock=lambda: now + 1800)
    assert (again.path / "window-state-0.db").read_text() == "state"
    again.release()  # marks it in use now

    # Away for longer: emptied, and marked in use from now on.
    later = claim_worker_dir(tmp_path, 0, stale_after_s=3600, clock=lambda: now + 2 * 3600)
    assert later.path.is_dir() and not any(later.path.iterdir())
    lock = tmp_path / "faust" / "worker-0.lock"
    assert lock.stat().st_mtime == pytest.approx(now + 2 * 3600)
    later.release()


def test_a_running_worker_keeps_its_directory_marked_in_use(tmp_path: Path) -> None:
    claimed = claim_worker_dir(tmp_path, 0)
    lock = tmp_path / "faust" / "worker-0.lock"
    claimed.mark_in_use(at=1_000_000.0)  # as if claimed long ago
    claimed.keep_marked(every_s=0.05)
    deadline = time.monotonic() + 10
    while lock.stat().st_mtime == 1_000_000.0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lock.stat().st_mtime > time.time() - 60
    claimed.release()

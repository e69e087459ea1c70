"""Per-user table state on disk (``MEMSTREAM_TABLE_STORE=rocksdb``): faust's RocksDB store (through
rocksdict), with each key in its user's partition, and one directory per worker process.

faust's store files a key under the partition of the event being processed, and refuses a write
outside an event. Neither fits memstream's tables (``use_partitioner``: a key's changelog record
goes to its user's partition, ``partition_for``): an ingest batch holds the turns of several
partitions, the idle timer writes outside any event, and a key filed under another partition would
outlive that partition's revocation and be read back stale. :class:`UserStore` files, reads and
deletes every key in its user's partition, the changelog partition its records go to, which is
also where recovery (faust's ``apply_changelog_batch``, by record partition) puts it.

RocksDB locks each partition's database for one process. The workers of ``memstream up`` share
``MEMSTREAM_DATA_DIR``, so each takes a directory of its own, ``faust/worker-<i>``, held by a
lock file for as long as the process lives (the kernel drops the lock when it dies, even by
SIGKILL): :func:`claim_worker_dir`.

A database can also be ahead of its changelog: the topic was deleted and made again, or the broker
came back empty (Tansu keeps its data in memory). faust then refuses to recover (its
``ConsistencyError``) and the worker would crash at every start. Kafka Streams wipes such a store
and restores it from the changelog; so does :class:`ChangelogRecovery`, for the partition concerned.

A directory left unused for longer than the changelogs keep their tombstones would hold users
erased meanwhile, with nothing left in the changelog to delete them: the worker holding it marks
it in use (the lock file's time) while it runs, and a directory unused for longer than
``MEMSTREAM_TABLE_STALE_AFTER_S`` is emptied when claimed, its state read from the changelogs.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faust.stores import STORES
from faust.stores import rocksdb as faust_rocksdb
from faust.tables.recovery import Recovery
from faust.types import TP, AppT, ConsumerT
from rocksdict import Rdict

from memstream.adapters.kafka import partition_for

log = logging.getLogger("memstream")

SCHEME = "memstream-rocksdb"  # faust store URL scheme of UserStore (registered below)

# RocksDB memory per partition database: each worker opens one per table and partition it holds
# (active or standby), and faust's defaults (64 MiB x 3 memtables, a 2 GiB block cache) are sized
# for a few large tables. The state here is small per user; these bound a worker's RocksDB memory.
ROCKSDB_OPTIONS: dict[str, Any] = {
    "write_buffer_size": 8 * 1024 * 1024,
    "max_write_buffer_number": 2,
    "block_cache_size": 32 * 1024 * 1024,
}


class UserStore(faust_rocksdb.Store):
    """faust's RocksDB store with every key in its user's partition's database (see the module)."""

    def __init__(self, *args: Any, options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, options={**ROCKSDB_OPTIONS, **(options or {})}, **kwargs)

    def update(self, *args: Any, **kwargs: Any) -> None:
        # The table's update (the handlers' ``states.update``) ends in its store's, which faust's
        # serialized stores inherit from a dict wrapper whose ``data`` they lack: key by key here.
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def _partition_of(self, key: bytes) -> int:
        partitions = self.table.partitions or self.app.conf.topic_partitions
        return partition_for(key, partitions)

    def _set(self, key: bytes, value: bytes | None) -> None:
        self._db_for_partition(self._partition_of(key)).put(key, value)

    def _get(self, key: bytes) -> bytes | None:
        # Only a database this worker has open (an assigned or standby partition): as with the
        # in-memory store, a user whose partition is not here has no state here.
        db = self._dbs.get(self._partition_of(key))
        if db is None:
            return None
        value: bytes | None = db.get(key)
        return value

    def _contains(self, key: bytes) -> bool:
        return self._get(key) is not None

    def _del(self, key: bytes) -> None:
        db = self._dbs.get(self._partition_of(key))
        if db is not None:
            db.delete(key)

    def discard_partition(self, partition: int) -> None:
        """Delete this worker's database of ``partition``: it opens empty next time, with no offset."""
        db = self._dbs.pop(partition, None)
        if db is not None:
            db.close()
        self._key_index.clear()
        path = self.partition_path(partition)
        if path.exists():
            Rdict.destroy(str(path))


STORES.aliases[SCHEME] = f"{__name__}:UserStore"


class ChangelogRecovery(Recovery):
    """faust's recovery, except that a partition whose database holds an offset past the end of its
    changelog (the topic was made again, or the broker lost its data) is emptied and read from the
    changelog's start, where faust would raise ``ConsistencyError``: the changelog no longer backs
    what the database holds, so none of it is kept."""

    async def _build_offsets(
        self, consumer: ConsumerT, tps: set[TP], destination: Counter[TP], title: str
    ) -> None:
        await super()._build_offsets(consumer, tps, destination, title)
        if title != "active":  # faust builds the standbys' highwaters after their offsets
            return
        for tp in tps:
            offset, highwater = destination[tp], self.active_highwaters.get(tp)
            store = getattr(self.tp_to_table[tp], "data", None)
            # faust's own test (recovery.py): both set and the offset past the highwater.
            if offset and highwater and offset > highwater and isinstance(store, UserStore):
                log.warning(
                    "%s holds offset %d, past the end of its changelog (%d): emptied, read from the start",
                    tp,
                    offset,
                    highwater,
                )
                store.discard_partition(tp.partition)
                destination[tp] = -1


def use_changelog_recovery(app: AppT) -> None:
    """Make ``app``'s tables recover with :class:`ChangelogRecovery` (before the app starts)."""
    tables = app.tables
    tables._recovery = ChangelogRecovery(app, tables, beacon=tables.beacon, loop=tables.loop)  # type: ignore[attr-defined]


def store_url(table_store: str) -> str:
    """faust's ``store`` setting for ``MEMSTREAM_TABLE_STORE``."""
    return f"{SCHEME}://" if table_store == "rocksdb" else "memory://"


def worker_dir(data_dir: Path, index: int) -> Path:
    """The faust data directory of worker ``index`` (table_store=rocksdb)."""
    return data_dir / "faust" / f"worker-{index}"


class WorkerDir:
    """Worker directory ``index``, held by an exclusive lock on ``worker-<index>.lock`` beside it
    until :meth:`release` (or the process's end). The lock file's modification time is when the
    directory was last known in use (:meth:`mark_in_use`)."""

    def __init__(self, data_dir: Path, index: int, fd: int) -> None:
        self.index = index
        self.path = worker_dir(data_dir, index)
        self._fd: int | None = fd
        self._marking: threading.Event | None = None

    def mark_in_use(self, at: float | None = None) -> None:
        if self._fd is not None:
            os.utime(self._fd, None if at is None else (at, at))

    def keep_marked(self, every_s: float) -> None:
        """Mark the directory in use every ``every_s`` seconds until :meth:`release`."""
        stop = self._marking = threading.Event()

        def mark() -> None:
            while not stop.wait(every_s):
                self.mark_in_use()

        threading.Thread(target=mark, name="worker-dir-in-use", daemon=True).start()

    def release(self) -> None:
        if self._marking is not None:
            self._marking.set()
        if self._fd is not None:
            self.mark_in_use()
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None


def claim_worker_dir(
    data_dir: Path,
    preferred: int,
    stale_after_s: float = float("inf"),
    limit: int = 1024,
    clock: Callable[[], float] = time.time,
) -> WorkerDir:
    """The worker directory ``preferred``, or the first free one after it when another process
    holds it (two `memstream up` started by hand on one data dir both get index 0), so a restarted
    worker finds its own state. Locks are ``flock``: released by the kernel when the holder dies.
    A directory last in use more than ``stale_after_s`` seconds ago is emptied (see the module)."""
    base = data_dir / "faust"
    base.mkdir(parents=True, exist_ok=True)
    for index in [preferred, *(i for i in range(limit) if i != preferred)]:
        fd = os.open(base / f"worker-{index}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        claimed = WorkerDir(data_dir, index, fd)
        unused_s = clock() - os.fstat(fd).st_mtime
        if claimed.path.exists() and unused_s > stale_after_s:
            log.warning(
                "worker directory %s was last in use %.0f s ago (more than %.0f s): emptied, its table "
                "state is read from the changelogs",
                claimed.path,
                unused_s,
                stale_after_s,
            )
            shutil.rmtree(claimed.path)
        claimed.path.mkdir(parents=True, exist_ok=True)
        claimed.mark_in_use(clock())
        if index != preferred:
            log.info(
                "worker directory %d is held by another process; this worker uses %s", preferred, claimed.path
            )
        return claimed
    raise RuntimeError(f"no free worker directory under {base} (all {limit} held)")

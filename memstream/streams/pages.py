"""A worker's status port: ``/metrics``, ``/healthz``, ``/readyz``, ``/status`` (:data:`PUBLIC_PAGES`),
open to whoever may scrape the worker: counts and states, never a user's text. The stores it holds
for gateways are on its internal port, behind a token (``streams/internal.py``); the recall a gateway
sends there runs here (:class:`Recalls`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import faust
import orjson
from faust.types import TP
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from memstream.adapters import metrics
from memstream.adapters.remote_recall import serve_recall
from memstream.core.embedder import Embedder
from memstream.core.store import VectorStore
from memstream.streams.ingest import IngestProcessor
from memstream.streams.read_leases import ReadLeases

# Every page of the status port ("/" is faust's index, {"status": "OK"}). A page added there without
# being added here fails tests/test_internal_port.py: user data belongs on the internal port.
PUBLIC_PAGES = ("/", "/metrics", "/healthz", "/readyz", "/status")


class Readiness:
    """A worker is ready once the consumer group has given it its first assignment (after its
    agents and tables took the partitions). An empty assignment counts: a replica beyond the
    partition count is a standby, which is all it can be. It stays ready through later rebalances."""

    def __init__(self) -> None:
        self.assignments = 0

    def assigned(self, assigned: set[TP]) -> None:
        self.assignments += 1

    def answer(self, partitions: Sequence[int]) -> tuple[int, dict[str, Any]]:
        """HTTP status and body of ``/readyz``."""
        if not self.assignments:
            return 503, {"ready": False, "reason": "waiting for the first partition assignment"}
        return 200, {"ready": True, "partitions": sorted(partitions)}


class Recalls:
    """A gateway's recall, run here on a partition this worker holds: one request instead of one
    per store call. In a thread, so the event loop keeps ingesting, under a lease that keeps a
    rebalance from closing the shard meanwhile; past ``leases.limit`` recalls at once, 503 (the
    gateway sheds it) rather than a queue that would starve ingest."""

    def __init__(
        self,
        held: Callable[[], set[int]],
        leases: ReadLeases,
        store_of: Callable[[int], VectorStore],
        embedder: Embedder,
    ) -> None:
        self.held = held
        self.leases = leases
        self.store_of = store_of
        self.embedder = embedder

    async def answer(self, partition: str, query: bytes) -> tuple[int, bytes]:
        """HTTP status and body (the answer, or the error's reason) of ``POST /recall/{partition}`` on the
        internal port."""
        # No await between the check and the lease: a rebalance cannot close the shard in between.
        if not partition.isdigit() or int(partition) not in self.held():
            return 409, f"partition {partition} is not held here".encode()
        p = int(partition)
        if not self.leases.try_enter(p):
            metrics.WORKER_RECALLS_SHED.inc()
            return 503, f"{self.leases.limit} recalls already running on this worker".encode()
        asked = time.perf_counter()

        def run() -> bytes:
            started = time.perf_counter()
            metrics.WORKER_RECALL_SECONDS.labels("queued").observe(started - asked)
            try:
                return serve_recall(self.store_of(p), self.embedder, query)
            finally:
                metrics.WORKER_RECALL_SECONDS.labels("run").observe(time.perf_counter() - started)

        try:
            return 200, await asyncio.to_thread(run)
        except ValueError as exc:
            return 400, str(exc).encode()
        finally:
            self.leases.exit(p)


def add_pages(
    app: faust.App,
    readiness: Readiness,
    processor: IngestProcessor,
    held: Callable[[], set[int]],
    update_lag: Callable[[], None],
    internal_port: int | None,
) -> None:
    """The status port's pages; ``/status`` names the internal port (if any) for gateways to find."""

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        return web.bytes(generate_latest(), content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        return web.json({"ok": True})

    @app.page("/readyz")
    async def readyz(web: Any, request: Any) -> Any:
        status, body = readiness.answer(sorted(held()))
        return web.json(body, status=status)

    @app.page("/status")
    async def status_page(web: Any, request: Any) -> Any:
        update_lag()
        lag = {
            f"{s.labels['topic']}/{s.labels['partition']}": s.value
            for m in metrics.CONSUMER_LAG.collect()
            for s in m.samples
        }
        partitions = sorted(held())
        body = {**processor.status(partitions), "partitions": partitions, "lag": lag}
        if internal_port:
            body["internal_port"] = internal_port
        return web.bytes(orjson.dumps(body), content_type="application/json")

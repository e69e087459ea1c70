"""A worker's status port: ``/metrics``, ``/healthz``, ``/readyz``, ``/status`` (:data:`PUBLIC_PAGES`),
open to whoever may scrape the worker: counts and states, never a user's text. The stores it holds
for gateways are on its internal port, behind a token (``memstream/embedded_store/internal.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import faust
import orjson
from faust.types import TP
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from memstream.adapters import metrics

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


def add_pages(
    app: faust.App,
    readiness: Readiness,
    status: Callable[[list[int]], dict[str, Any]],
    held: Callable[[], set[int]],
    update_lag: Callable[[], None],
    internal_port: int | None,
) -> None:
    """The status port's pages: ``/status`` shows ``status`` of the partitions ``held`` (the worker's,
    streams/worker.py), and names the internal port (if any) for gateways to find."""

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
        body = {**status(partitions), "partitions": partitions, "lag": lag}
        if internal_port:
            body["internal_port"] = internal_port
        return web.bytes(orjson.dumps(body), content_type="application/json")

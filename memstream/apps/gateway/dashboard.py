"""``/dashboard``: live charts of ingest, consolidation, token spend, lag and shedding, in the
gateway itself, for a deployment without Grafana. ``/dashboard/data`` sums this gateway's metrics
and every worker's ``/metrics`` (their status ports: the URLs the gateway reads stores from); the
page is one HTML file with its script inline, so it needs nothing from outside the gateway."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator
from importlib.resources import files

import httpx
from fastapi import APIRouter
from fastapi.responses import HTMLResponse
from prometheus_client import REGISTRY
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from memstream.adapters.settings import Settings
from memstream.apps.gateway.stores import worker_status_urls
from memstream.core.dashboard import Sample, snapshot

WORKER_TIMEOUT_S = 2.0


def _samples(families: Iterable[Metric]) -> Iterator[Sample]:
    for family in families:
        for s in family.samples:
            yield s.name, s.labels, s.value


async def _worker_metrics(client: httpx.AsyncClient, url: str) -> list[Sample] | None:
    try:
        resp = await client.get(f"{url}/metrics")
        resp.raise_for_status()
        return list(_samples(text_string_to_metric_families(resp.text)))
    except (httpx.HTTPError, ValueError):
        return None  # counted as unreachable on the page; a worker restarting is normal


def dashboard_router(settings: Settings) -> APIRouter:
    router = APIRouter(tags=["ops"])
    page = files("memstream.apps.gateway").joinpath("dashboard.html").read_text(encoding="utf-8")
    urls = (
        worker_status_urls(settings) if settings.worker.metrics_port or settings.gateway.worker_urls else []
    )

    @router.get("/dashboard", response_class=HTMLResponse)
    def get_dashboard() -> HTMLResponse:
        """Live charts of this deployment's metrics (no data of any user: the same as /metrics)."""
        return HTMLResponse(page)

    @router.get("/dashboard/data")
    async def get_dashboard_data() -> dict[str, object]:
        """The charts' values now: this gateway's metrics and every worker's, summed."""
        async with httpx.AsyncClient(timeout=WORKER_TIMEOUT_S) as client:
            workers = await asyncio.gather(*(_worker_metrics(client, u) for u in urls))
        samples = list(_samples(REGISTRY.collect()))
        reached = [w for w in workers if w is not None]
        for w in reached:
            samples.extend(w)
        return snapshot(time.time(), samples, reached=1 + len(reached), unreachable=len(urls) - len(reached))

    return router

"""The gateway's stores (an app's wiring: it joins the adapters with the collection layouts)."""

from __future__ import annotations

from memstream.adapters.settings import Settings
from memstream.adapters.store.shards import Shards, open_shards
from memstream.core.memories import memories_spec
from memstream.core.unit_views import views_spec
from memstream.core.units import units_spec
from memstream.embedded_store.remote_store import OwnerShards


def gateway_shards(settings: Settings, dim: int) -> Shards:
    """The stores as a process that owns no partition reads them: the Qdrant server directly, or
    each embedded partition through the worker that holds it."""
    if settings.storage.store == "qdrant":
        return open_shards(settings.storage, [units_spec(dim), views_spec(dim), memories_spec(dim)])
    token = settings.worker.internal_token
    return OwnerShards(worker_status_urls(settings), token.get_secret_value() if token else None)


def worker_status_urls(settings: Settings) -> list[str]:
    """Each worker's status port: MEMSTREAM_WORKER_URLS, else the ports `memstream up` gives them."""
    return settings.gateway.worker_urls or [
        f"http://{settings.worker.metrics_host}:{settings.worker.metrics_port + i}"
        for i in range(settings.worker.workers)
    ]

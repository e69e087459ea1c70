"""Assemble and run the pipeline: broker (embedded unless configured), topics, store, embedder,
processor, faust worker. ``memstream up`` is :func:`run_up`."""

from __future__ import annotations

import asyncio
import logging
from contextlib import ExitStack

from faust import Worker

from memstream.broker import Broker
from memstream.embedders import make_embedder
from memstream.kafka import ensure_topics
from memstream.settings import Settings
from memstream.store import open_store
from streams.app import build_app
from streams.ingest import IngestProcessor

log = logging.getLogger("memstream")


def run_up(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        if settings.bootstrap_servers is None:
            broker = stack.enter_context(
                Broker(settings.embedded_broker_port, settings.data_dir / "broker.log")
            )
            log.info(
                "embedded Tansu broker on %s (memory storage: data is gone when it stops)", broker.bootstrap
            )
            settings = settings.model_copy(update={"tansu_quirks": True})
        asyncio.run(ensure_topics(settings))
        store = open_store(settings)
        stack.callback(store.close)
        embedder = make_embedder(settings)
        processor = IngestProcessor(settings, embedder, store)
        log.info(
            "pipeline: embedder=%s dim=%d theta_sim=%.2f theta_count=%d store=%s",
            embedder.name,
            embedder.dim,
            processor.theta_sim,
            settings.theta_count,
            settings.store,
        )
        app = build_app(settings, processor)
        if settings.metrics_port:
            log.info(
                "metrics and status on http://%s:%d/metrics and /status",
                settings.metrics_host,
                settings.metrics_port,
            )
        worker = Worker(app, loglevel=settings.log_level, quiet=True, redirect_stdouts=False)
        try:
            worker.execute_from_commandline()
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise

"""Assemble and run the pipeline: broker (embedded unless configured), topics, store, embedder,
processor, faust worker. ``memstream up`` is :func:`run_up`.

With ``workers`` > 1, ``up`` runs that many worker processes in one consumer group; Kafka gives
each a share of the partitions, and each serves ``/metrics`` and ``/status`` on its own port
(``metrics_port`` + its index). They stop together: on a signal, or when one of them exits.
With ``table_store=rocksdb`` worker *i* keeps its tables under ``data_dir/faust/worker-<i>``
(streams/table_store.py), found again when ``up`` restarts.

The workers, the gateway and the embedded broker (``MEMSTREAM_BROKER``,
memstream/adapters/embedded_broker.py) run in sessions of their own (Ctrl-C in a terminal reaches
``up`` alone) and die with ``up`` (memstream/adapters/processes.py). With the embedded broker the
workers always run as child processes, even a single one without a gateway; with Tansu, whose log is
in memory, ``up`` drains before it stops them (memstream/apps/drain.py).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from types import FrameType

import faust

from memstream.adapters.embedded_broker import broker_kind, describe, embedded_broker
from memstream.adapters.embedders import make_embedder
from memstream.adapters.kafka import ensure_topics, wait_group_coordinator
from memstream.adapters.processes import die_with_parent
from memstream.adapters.settings import Settings
from memstream.adapters.store import open_shards
from memstream.apps.drain import drain
from memstream.apps.status import worker_ports
from memstream.consumers import build_consolidation
from memstream.core.memories import memories_spec
from memstream.core.unit_views import views_spec
from memstream.core.units import units_spec
from memstream.streams.app import build_app
from memstream.streams.ingest import IngestProcessor
from memstream.streams.table_store import claim_worker_dir
from memstream.streams.worker import Worker

log = logging.getLogger("memstream")
EMBEDDED_KAFKA_SESSION_S = 10.0


def run_up(settings: Settings) -> int:
    """Run until stopped; the exit code of the pipeline."""
    workers, partitions = settings.worker.workers, settings.kafka.topic_partitions
    if workers > partitions:
        raise ValueError(
            f"MEMSTREAM_WORKERS={workers} is more than the {partitions} topic "
            "partitions; the extra workers would sit idle"
        )
    settings.storage.data_dir.mkdir(parents=True, exist_ok=True)
    embedded = broker_kind(settings) if settings.kafka.bootstrap_servers is None else None
    with ExitStack() as stack:
        if embedded:
            started = time.monotonic()
            broker = embedded_broker(settings)
            stack.enter_context(broker)
            log.info(
                "embedded broker on %s in %.1fs: %s",
                broker.bootstrap,
                time.monotonic() - started,
                describe(settings),
            )
            settings = settings.replace(
                bootstrap_servers=broker.bootstrap,
                tansu_quirks=embedded == "tansu",
                # A restart after kill -9 waits this long for the killed workers' partitions.
                group_session_timeout_s=settings.worker.group_session_timeout_s
                or (EMBEDDED_KAFKA_SESSION_S if embedded == "kafka" else None),
            )
        asyncio.run(ensure_topics(settings))
        if embedded == "kafka":
            waited = asyncio.run(wait_group_coordinator(settings))
            log.info("Kafka's group coordinator answered after %.1fs", waited)
        if settings.worker.workers == 1 and not settings.gateway.gateway_port and not embedded:
            run_worker(settings)
            return 0
        # Only Tansu's log is in memory: Kafka keeps what was accepted, and a stop need not wait.
        return run_workers(settings, drain_first=embedded == "tansu")


def run_worker(settings: Settings) -> None:
    """One faust worker in this process."""
    if settings.storage.table_store != "rocksdb":
        _run_worker(settings)
        return
    # RocksDB locks its databases for one process: this worker's own directory, held while it runs.
    claimed = claim_worker_dir(
        settings.storage.data_dir, settings.worker.worker_index, settings.storage.table_stale_after_s
    )
    claimed.keep_marked(every_s=min(600.0, settings.storage.table_stale_after_s / 4))
    try:
        log.info("table state in RocksDB under %s", claimed.path)
        _run_worker(settings.replace(worker_index=claimed.index))
    finally:
        claimed.release()


def _run_worker(settings: Settings) -> None:
    embedder = make_embedder(settings.embedding)
    specs = [units_spec(embedder.dim), views_spec(embedder.dim)]
    if {"consolidate", "index"} & set(settings.worker.roles):
        specs.append(memories_spec(embedder.dim))
    shards = open_shards(settings.storage, specs)
    try:
        processor = IngestProcessor(settings, embedder, shards)
        consolidation = build_consolidation(settings, embedder, processor.theta_sim)
        log.info(
            "pipeline: embedder=%s dim=%d theta_sim=%.2f theta_count=%d store=%s",
            embedder.name,
            embedder.dim,
            processor.theta_sim,
            settings.consolidation.theta_count,
            settings.storage.store,
        )
        log.info(
            "consolidation: %s",
            f"LLM {settings.llm.llm_model} at {settings.llm.llm_base_url}"
            if consolidation.llm
            else "extractive (no LLM)",
        )
        app = build_app(Worker(settings, embedder, shards, processor, consolidation))
        if settings.worker.metrics_port:
            log.info(
                "metrics and status on http://%s:%d/metrics and /status",
                settings.worker.metrics_host,
                settings.worker.metrics_port,
            )
        # Everything imported and built so far (faust, numpy, scikit-learn, openai, the model...)
        # lives as long as the process: move it out of the cyclic GC's reach, or every full
        # collection walks it again (measured: ~8 % of ingest throughput).
        gc.freeze()
        gc.set_threshold(50_000, 20, 10)
        worker = faust.Worker(app, loglevel=settings.worker.log_level, quiet=True, redirect_stdouts=False)
        try:
            worker.execute_from_commandline()
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise
    finally:
        shards.close()


def run_workers(settings: Settings, drain_first: bool = False) -> int:
    """``settings.worker.workers`` worker processes, and the gateway unless its port is 0; returns when
    they have all stopped. With ``drain_first``, the accepted turns are stored before they stop."""
    env = {
        **os.environ,
        "MEMSTREAM_WORKERS": "1",
        "MEMSTREAM_BOOTSTRAP_SERVERS": settings.kafka.brokers,
        "MEMSTREAM_TANSU_QUIRKS": str(settings.kafka.tansu_quirks).lower(),
        # The workers' internal port (their stores): unless set, a token only the gateway started here knows.
        "MEMSTREAM_INTERNAL_TOKEN": (
            settings.worker.internal_token.get_secret_value()
            if settings.worker.internal_token
            else secrets.token_urlsafe(32)
        ),
    }
    if settings.worker.group_session_timeout_s:
        env["MEMSTREAM_GROUP_SESSION_TIMEOUT_S"] = str(settings.worker.group_session_timeout_s)
    if settings.embedding.embedder == "minilm" and not settings.embedding.minilm_threads:
        # One onnxruntime session per core in all: N workers must not each take every core.
        env["MEMSTREAM_MINILM_THREADS"] = str(max(1, (os.cpu_count() or 1) // settings.worker.workers))
    ports = worker_ports(settings) or [0] * settings.worker.workers
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "memstream.apps.cli", "up"],
            env={
                **env,
                "MEMSTREAM_METRICS_PORT": str(port),
                "MEMSTREAM_INTERNAL_PORT": str(
                    settings.worker.internal_port + i if settings.worker.internal_port else 0
                ),
                "MEMSTREAM_GATEWAY_PORT": "0",
                # worker i's table directory (table_store=rocksdb): the same one after a restart
                "MEMSTREAM_WORKER_INDEX": str(i),
            },
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        for i, port in enumerate(ports)
    ]
    log.info("%d workers: pids %s", len(workers), ", ".join(str(p.pid) for p in workers))
    gateway = None
    if settings.gateway.gateway_port:
        gateway_env = {**env, "MEMSTREAM_WORKERS": str(settings.worker.workers)}
        gateway = subprocess.Popen(
            [sys.executable, "-m", "memstream.apps.cli", "gateway"],
            env=gateway_env,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        log.info(
            "gateway on http://%s:%d (pid %d)",
            settings.gateway.gateway_host,
            settings.gateway.gateway_port,
            gateway.pid,
        )
    procs = [*workers, *([gateway] if gateway else [])]

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # SIGINT too: asyncio.run (in the drain) would otherwise take Ctrl-C for itself and only
    # cancel its task, which the Kafka clients' cleanup can swallow; a second signal must stop it.
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        failed = [p for p in procs if p.returncode not in (None, 0)]
        for p in failed:
            log.error("process %d exited with code %s; stopping the others", p.pid, p.returncode)
        return 1 if failed else 0
    except KeyboardInterrupt:
        return 0
    finally:
        if drain_first:
            try:
                drain(settings, gateway, workers)
            except KeyboardInterrupt:
                log.warning("stopping now: a second signal ended the wait for the accepted turns")
            except Exception as exc:  # the children must still be stopped below
                log.error("stopping without waiting for the accepted turns: %r", exc)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()

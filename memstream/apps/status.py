"""The pipeline's status as ``memstream status`` shows it: every worker's ``/status`` fetched,
merged and rendered. Shared by the CLI, the demo and the benchmarks."""

from __future__ import annotations

import urllib.request
from collections.abc import Sequence
from typing import Any

import orjson

from memstream.adapters import kafka
from memstream.adapters.settings import Settings

IN_FLIGHT = "memstream_consolidation_in_flight"
QUEUED = "memstream_consolidation_queued"


def worker_ports(settings: Settings) -> list[int]:
    """The ``/metrics`` and ``/status`` port of each worker (none when metrics are off)."""
    if not settings.worker.metrics_port:
        return []
    return [settings.worker.metrics_port + i for i in range(settings.worker.workers)]


def fetch_status(settings: Settings, timeout: float = 5.0) -> dict[str, Any]:
    """The pipeline's status: every worker's ``/status``, merged."""
    parts = []
    for port in worker_ports(settings):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=timeout) as resp:
            parts.append(dict(orjson.loads(resp.read())))
    return merge_status(parts)


def consolidating(status: dict[str, Any]) -> float:
    """Records the consolidation stages work on or hold behind a user's record in flight."""
    return sum(status.get(IN_FLIGHT, {}).values()) + sum(status.get(QUEUED, {}).values())


async def settled(settings: Settings) -> bool:
    """Whether every accepted turn's consolidation is done: no stage works on or holds a record
    (a slow LLM call keeps its record in flight while the topics show no lag), then every record
    of the topics after ingest committed (:func:`memstream.adapters.kafka.settled`)."""
    return not consolidating(fetch_status(settings)) and await kafka.settled(settings)


def merge_status(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Workers' statuses as one: counts add up, per-partition maps and partition lists join;
    ``config`` is the same in every worker; each worker's own internal port is left out."""
    merged: dict[str, Any] = {"workers": len(parts)}
    for part in parts:
        for key, value in part.items():
            if key == "internal_port":
                continue
            if key == "config":
                merged.setdefault(key, value)
            elif isinstance(value, dict):
                into = merged.setdefault(key, {})
                for label, n in value.items():
                    into[label] = into.get(label, 0) + n
            elif isinstance(value, list):
                merged[key] = sorted([*merged.get(key, []), *value])
            else:
                merged[key] = merged.get(key, 0) + value
    return merged


def render_status(status: dict[str, Any]) -> str:
    def total(name: str) -> float:
        return sum(status.get(name, {}).values())

    config = status["config"]

    lines = [
        f"embedder {config['embedder']}  theta_sim {config['theta_sim']:.2f}  "
        f"theta_count {config['theta_count']}  workers {status['workers']}",
        f"units in store            {status['units_in_store']:>10,}",
        f"turns ingested            {total('memstream_turns_ingested'):>10,.0f}",
        f"units stored (new)        {total('memstream_units_stored'):>10,.0f}",
        f"duplicates recognised     {total('memstream_duplicate_turns'):>10,.0f}",
        f"turns rerouted            {total('memstream_turns_rerouted'):>10,.0f}",
        f"consolidation requests    {total('memstream_consolidation_requests'):>10,.0f}",
        f"late events               {total('memstream_late_events'):>10,.0f}",
    ]
    for label, n in sorted(status.get("memstream_windows_closed", {}).items()):
        lines.append(f"windows closed {label:<18}{n:>8,.0f}")
    for label, n in sorted(status.get("memstream_dead_letters", {}).items()):
        lines.append(f"dead letters {label:<20}{n:>8,.0f}")
    for label, n in sorted(status.get("memstream_consolidations", {}).items()):
        lines.append(f"consolidations {label:<18}{n:>8,.0f}")
    for label, n in sorted(status.get("memstream_memory_updates", {}).items()):
        lines.append(f"memory updates {label:<18}{n:>8,.0f}")
    in_flight, queued = status.get(IN_FLIGHT, {}), status.get(QUEUED, {})
    for stage in sorted({*in_flight, *queued}):
        n, waiting = in_flight.get(stage, 0), queued.get(stage, 0)
        lines.append(f"in flight {stage:<23}{n:>8,.0f}  ({waiting:,.0f} queued)")
    lag = status.get("lag", {})
    lines.append(f"consumer lag              {sum(lag.values()):>10,.0f}  ({len(lag)} partitions)")
    return "\n".join(lines)

"""What the gateway's ``/dashboard`` draws: each chart one metric, summed by one label, from the
metric names the Grafana dashboard queries (deploy/monitoring.py). Pure: samples in, series out;
the page turns counters into rates from two snapshots."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Sample = tuple[str, Mapping[str, str], float]  # a sample's name as exposed, its labels, its value


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    metric: str  # the sample name as exposed: a counter's ends in _total
    by: str | None  # the label each line is drawn for; None sums everything into one line
    rate: bool  # a counter, drawn as its change per second times ``scale``; else a gauge as it is
    scale: float = 1.0


CHARTS: tuple[Chart, ...] = (
    Chart("ingest", "Turns ingested / s, by tenant", "memstream_turns_ingested_total", "tenant", True),
    Chart("consolidation", "Consolidations / s, by stage", "memstream_consolidations_total", "trigger", True),
    Chart("tokens", "LLM tokens / hour, by tenant", "memstream_llm_tokens_total", "tenant", True, 3600),
    Chart("lag", "Consumer lag (records), by topic", "memstream_consumer_lag", "topic", False),
    Chart(
        "shed",
        "Requests shed / s (429 key busy, 503 gateway full), by reason",
        "memstream_gateway_shed_total",
        "reason",
        True,
    ),
    Chart("limited", "Requests rate limited / s (429)", "memstream_gateway_rate_limited_total", None, True),
)

ALL = "all"  # the line's name when a chart sums everything


def chart_values(samples: Iterable[Sample], charts: Iterable[Chart] = CHARTS) -> dict[str, dict[str, float]]:
    """Each chart's current value per line: the chart's metric summed over every source (the
    gateway and each worker) and every label but ``by``."""
    wanted = {c.metric: c for c in charts}
    out: dict[str, dict[str, float]] = {c.id: defaultdict(float) for c in wanted.values()}
    for name, labels, value in samples:
        chart = wanted.get(name)
        if chart is not None:
            out[chart.id][labels.get(chart.by, "") if chart.by else ALL] += value
    return {k: dict(v) for k, v in out.items()}


def snapshot(at: float, samples: Iterable[Sample], reached: int, unreachable: int) -> dict[str, Any]:
    """The body of ``/dashboard/data``: the charts, their values now, and how many sources answered."""
    values = chart_values(samples)
    return {
        "at": at,
        "sources": {"reached": reached, "unreachable": unreachable},
        "charts": [
            {"id": c.id, "title": c.title, "rate": c.rate, "scale": c.scale, "values": values[c.id]}
            for c in CHARTS
        ],
    }

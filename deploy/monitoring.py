"""memstream's Prometheus alert rules and Grafana dashboard, defined once, as code.

``python -m deploy.generate`` writes them to ``deploy/prometheus/``, ``deploy/grafana/`` and the
Helm chart's ``files/`` (the chart's PrometheusRule and dashboard ConfigMap read those copies);
``python -m deploy.generate --check`` (run by ``make deploy-check``) fails when a committed file
differs from what this module generates. Every metric queried here is declared in
``memstream/adapters/metrics.py``; ``tests/test_dashboards.py`` scrapes a running pipeline and gateway and
checks that each one is exported.

Thresholds are the numbers below: change them here, run ``make deploy-generate``, and update the
promtool tests in ``deploy/prometheus/memstream-alerts.test.yaml``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

# --- alert thresholds -------------------------------------------------------------------------
LAG_RECORDS = 10_000  # turns not yet read by the ingest processors, summed over partitions
LAG_FOR = "15m"
DEAD_LETTERS_PER_15M = 10  # dead letters of one stage and reason within 15 minutes
LLM_ERROR_RATIO = 0.10  # LLM calls given up or invalid after the repair, over calls finished
RECALL_P99_SECONDS = 1.0
GATEWAY_5XX_RATIO = 0.05

RUNBOOK = "docs/operations.md#alerts"
RECALL = 'route="/v1/recall"'


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    severity: str
    summary: str
    description: str
    for_: str | None = None
    runbook: str = RUNBOOK

    def rule(self) -> dict[str, Any]:
        out: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_:
            out["for"] = self.for_
        out["labels"] = {"severity": self.severity, "service": "memstream"}
        out["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "runbook": self.runbook,
        }
        return out


LAG = "sum by (namespace) (max by (namespace, topic, partition) (memstream_consumer_lag))"

ALERTS: tuple[Alert, ...] = (
    Alert(
        "MemstreamConsumerLagHigh",
        f"{LAG} > {LAG_RECORDS}",
        "warning",
        "memstream ingest is {{ $value | humanize }} turns behind",
        f"More than {LAG_RECORDS} turns wait on the turns topic in {{{{ $labels.namespace }}}} for "
        f"{LAG_FOR}: add ingest replicas (up to the partition count) or give them more CPU.",
        for_=LAG_FOR,
    ),
    Alert(
        "MemstreamIngestStalled",
        f"({LAG} > 0) unless on (namespace) "
        "(sum by (namespace) (rate(memstream_turns_ingested_total[10m])) > 0)",
        "critical",
        "memstream ingest is not reading the turns topic",
        "Turns are waiting in {{ $labels.namespace }} and no ingest processor has read one for 10 minutes.",
        for_="10m",
    ),
    Alert(
        "MemstreamDeadLettersGrowing",
        "sum by (namespace, stage, reason) (increase(memstream_dead_letters_total[15m])) "
        f"> {DEAD_LETTERS_PER_15M}",
        "warning",
        "memstream dead letters: {{ $labels.stage }}/{{ $labels.reason }}",
        "{{ $value | humanize }} records were dead-lettered in 15 minutes in {{ $labels.namespace }} "
        "(stage {{ $labels.stage }}, reason {{ $labels.reason }}); the dead-letter topic has each "
        "original record and the reason.",
        for_="5m",
    ),
    Alert(
        "MemstreamConsolidationDeadLetters",
        'sum by (namespace, reason) (increase(memstream_dead_letters_total{stage="consolidate"}[1h])) > 0',
        "warning",
        "memstream consolidation work was dead-lettered ({{ $labels.reason }})",
        "Consolidation output stayed invalid after the repair call in {{ $labels.namespace }}: that "
        "work is on the dead-letter topic, not in memory. Check the model and prompt versions.",
    ),
    Alert(
        "MemstreamLLMErrorRate",
        'sum by (namespace, stage, model) (rate(memstream_llm_calls_total{outcome=~"failed|invalid"}[10m])) '
        "/ sum by (namespace, stage, model) "
        '(rate(memstream_llm_calls_total{outcome=~"ok|repaired|invalid|failed"}[10m])) '
        f"> {LLM_ERROR_RATIO}",
        "warning",
        "memstream LLM calls failing: {{ $labels.stage }} on {{ $labels.model }}",
        "{{ $value | humanizePercentage }} of {{ $labels.stage }} calls to {{ $labels.model }} failed "
        "after retries or stayed invalid in {{ $labels.namespace }}; failed work is deferred and retried.",
        for_="10m",
    ),
    Alert(
        "MemstreamTokenBudgetExhausted",
        'sum by (namespace, tenant) (increase(memstream_llm_calls_total{outcome="budget"}[15m])) > 0',
        "warning",
        "memstream tenant {{ $labels.tenant }} spent its daily LLM token budget",
        "Consolidation of tenant {{ $labels.tenant }} in {{ $labels.namespace }} is deferred until the "
        "next UTC midnight (MEMSTREAM_LLM_DAILY_TOKEN_BUDGET).",
    ),
    Alert(
        "MemstreamRecallLatencyHigh",
        "histogram_quantile(0.99, sum by (namespace, le) "
        f"(rate(memstream_gateway_request_seconds_bucket{{{RECALL}}}[5m]))) > {RECALL_P99_SECONDS}",
        "warning",
        "memstream recall p99 is {{ $value | humanizeDuration }}",
        f"The 99th percentile of POST /v1/recall has been above {RECALL_P99_SECONDS:g}s for 10 minutes "
        "in {{ $labels.namespace }}.",
        for_="10m",
    ),
    Alert(
        "MemstreamGatewayErrors",
        'sum by (namespace) (rate(memstream_gateway_requests_total{status=~"5.."}[5m])) '
        "/ sum by (namespace) (rate(memstream_gateway_requests_total[5m])) "
        f"> {GATEWAY_5XX_RATIO}",
        "critical",
        "memstream gateway answers {{ $value | humanizePercentage }} of requests with 5xx",
        "The gateway in {{ $labels.namespace }} cannot reach the broker or the store for part of its "
        "requests (503 with Retry-After); see its /readyz.",
        for_="10m",
    ),
)


def alert_rules() -> dict[str, Any]:
    """The Prometheus rule file (the PrometheusRule's ``spec``)."""
    return {"groups": [{"name": "memstream", "rules": [a.rule() for a in ALERTS]}]}


# --- dashboard ------------------------------------------------------------------------------
DS = "${datasource}"
NS = 'namespace=~"$namespace"'
TENANT = 'tenant=~"$tenant"'
RI = "$__rate_interval"
FINISHED = 'outcome=~"ok|repaired|invalid"'
DEFERRED = 'outcome="deferred"'
BUDGET = 'outcome="budget"'


def sel(*matchers: str) -> str:
    return "{" + ", ".join((NS, *matchers)) + "}"


def quantile(q: float, metric: str, by: str = "", *matchers: str) -> str:
    labels = ", ".join(x for x in (by, "le") if x)
    return f"histogram_quantile({q}, sum by ({labels}) (rate({metric}_bucket{sel(*matchers)}[{RI}])))"


@dataclass
class Row:
    title: str
    panels: list[g.Panel] = field(default_factory=list)


def ts(
    title: str,
    targets: list[tuple[str, str]],
    unit: str = "short",
    description: str = "",
    stacked: bool = False,
    width: int = 8,
) -> g.TimeSeries:
    return g.TimeSeries(
        title=title,
        description=description,
        dataSource=DS,
        targets=[
            g.Target(expr=expr, legendFormat=legend, refId=chr(ord("A") + i), datasource=DS)
            for i, (expr, legend) in enumerate(targets)
        ],
        unit=unit,
        stacking={"mode": "normal", "group": "A"} if stacked else {},
        fillOpacity=30 if stacked else 10,
        legendDisplayMode="table",
        legendCalcs=["mean", "max"],
        tooltipMode="multi",
        gridPos=g.GridPos(h=8, w=width, x=0, y=0),
    )


def stat(title: str, expr: str, unit: str = "short", description: str = "") -> g.Stat:
    return g.Stat(
        title=title,
        description=description,
        dataSource=DS,
        targets=[g.Target(expr=expr, refId="A", datasource=DS, instant=True)],
        format=unit,
        reduceCalc="lastNotNull",
        graphMode="area",
        gridPos=g.GridPos(h=4, w=4, x=0, y=0),
    )


def rows() -> list[Row]:
    turns = f"sum(rate(memstream_turns_ingested_total{sel()}[{RI}]))"
    return [
        Row(
            "Overview",
            [
                stat("Turns ingested / s", turns, "reqps"),
                stat(
                    "Consumer lag (turns)",
                    f"sum(max by (topic, partition) (memstream_consumer_lag{sel()}))",
                    description="Turns on the turns topic not yet read by an ingest processor.",
                ),
                stat(
                    "Recall p95",
                    quantile(0.95, "memstream_gateway_request_seconds", "", RECALL),
                    "s",
                ),
                stat(
                    "LLM tokens, last 24 h",
                    f"sum(increase(memstream_llm_tokens_total{sel(TENANT)}[24h]))",
                ),
                stat(
                    "LLM calls per 1,000 turns (24 h)",
                    "1000 * sum(increase(memstream_llm_calls_total"
                    f"{sel(TENANT, FINISHED)}[24h])) "
                    f"/ sum(increase(memstream_turns_ingested_total{sel(TENANT)}[24h]))",
                    description="Consolidation calls only run when a topic recurs or a window closes; "
                    "an eager extractor makes 1,000.",
                ),
                stat("Dead letters, last hour", f"sum(increase(memstream_dead_letters_total{sel()}[1h]))"),
            ],
        ),
        Row(
            "Ingest",
            [
                ts(
                    "Ingest rate by tenant",
                    [
                        (
                            f"sum by (tenant) (rate(memstream_turns_ingested_total{sel(TENANT)}[{RI}]))",
                            "{{tenant}}",
                        ),
                        (f"sum(rate(memstream_units_stored_total{sel(TENANT)}[{RI}]))", "new units stored"),
                        (
                            f"sum(rate(memstream_duplicate_turns_total{sel()}[{RI}]))",
                            "redelivered (duplicates)",
                        ),
                        (
                            f"sum(rate(memstream_turns_rerouted_total{sel()}[{RI}]))",
                            "rerouted to their key's partition",
                        ),
                        (
                            f"sum(rate(memstream_gateway_turns_accepted_total{sel(TENANT)}[{RI}]))",
                            "accepted by the gateway",
                        ),
                    ],
                    "reqps",
                ),
                ts(
                    "Consumer lag by partition",
                    [
                        (
                            f"max by (topic, partition) (memstream_consumer_lag{sel()})",
                            "{{topic}}/{{partition}}",
                        )
                    ],
                    stacked=True,
                ),
                ts(
                    "Ingest batch time p95 by stage",
                    [(quantile(0.95, "memstream_ingest_stage_seconds", "stage"), "{{stage}}")],
                    "s",
                ),
                ts(
                    "Embedder latency p95 and batch size",
                    [
                        (quantile(0.95, "memstream_embed_seconds", "embedder"), "p95 {{embedder}} (s)"),
                        (
                            f"sum(rate(memstream_ingest_batch_size_sum{sel()}[{RI}])) "
                            f"/ sum(rate(memstream_ingest_batch_size_count{sel()}[{RI}]))",
                            "turns per batch (mean)",
                        ),
                    ],
                ),
                ts(
                    "Dead letters by stage and reason",
                    [
                        (
                            f"sum by (stage, reason) (increase(memstream_dead_letters_total{sel()}[{RI}]))",
                            "{{stage}}/{{reason}}",
                        )
                    ],
                    stacked=True,
                ),
                ts(
                    "Event times and late turns",
                    [
                        (
                            f"sum by (granularity) (rate(memstream_event_times_total{sel()}[{RI}]))",
                            "event time: {{granularity}}",
                        ),
                        (f"sum(rate(memstream_late_events_total{sel()}[{RI}]))", "late turns"),
                    ],
                    "reqps",
                ),
            ],
        ),
        Row(
            "Consolidation",
            [
                ts(
                    "Consolidation rate by trigger",
                    [
                        (
                            f"sum by (trigger) (rate(memstream_consolidations_total{sel()}[{RI}]))",
                            "{{trigger}}",
                        )
                    ],
                    "ops",
                    "Work handled by trigger: recurrence (a topic recurred), session/day/week/month "
                    "(a window closed), durative (a month's topics and personas).",
                    stacked=True,
                ),
                ts(
                    "Consolidation outcomes",
                    [
                        (
                            f"sum by (outcome) (rate(memstream_consolidations_total{sel()}[{RI}]))",
                            "{{outcome}}",
                        )
                    ],
                    "ops",
                    stacked=True,
                ),
                ts(
                    "Recurrence: requests fired per unit checked",
                    [
                        (
                            f"sum(rate(memstream_consolidation_requests_total{sel()}[{RI}])) "
                            f"/ sum(rate(memstream_recurrence_checks_total{sel()}[{RI}]))",
                            "fired / checked",
                        )
                    ],
                    "percentunit",
                ),
                ts(
                    "Windows closed by level",
                    [
                        (
                            f"sum by (level, reason) (rate(memstream_windows_closed_total{sel()}[{RI}]))",
                            "{{level}} ({{reason}})",
                        )
                    ],
                    "ops",
                    stacked=True,
                ),
                ts(
                    "Memory updates by op and kind",
                    [
                        (
                            f"sum by (op, kind) (rate(memstream_memory_updates_total{sel()}[{RI}]))",
                            "{{op}} {{kind}}",
                        )
                    ],
                    "ops",
                    stacked=True,
                ),
                ts(
                    "Deferred consolidation by trigger",
                    [
                        (
                            "sum by (trigger) (increase(memstream_consolidations_total"
                            f"{sel(DEFERRED)}[{RI}]))",
                            "{{trigger}}",
                        )
                    ],
                    description="LLM down or a tenant's token budget spent: retried later, never dropped.",
                ),
                ts(
                    "Consolidation in flight, queued and queue wait by stage",
                    [
                        (
                            f"sum by (stage) (memstream_consolidation_in_flight{sel()})",
                            "{{stage}} in flight",
                        ),
                        (
                            f"sum by (stage) (memstream_consolidation_queued{sel()})",
                            "{{stage}} queued",
                        ),
                        (
                            quantile(0.95, "memstream_consolidation_queue_wait_seconds", "stage"),
                            "p95 wait {{stage}} (s)",
                        ),
                        (
                            f"sum by (stage) (rate(memstream_consolidation_errors_total{sel()}[{RI}]))",
                            "{{stage}} errors/s (tried again)",
                        ),
                    ],
                    description="Records each stage works on now (many users at once, one user's in "
                    "order; at most 8 x MEMSTREAM_LLM_CONCURRENCY held per stage and worker), those queued "
                    "behind their user's record in flight, and how long "
                    "a record waited from its write to its topic until its work began. Errors: a "
                    "handler raised (logged); the record is tried again in place, its user waits.",
                    width=24,
                ),
            ],
        ),
        Row(
            "LLM calls and token spend",
            [
                ts(
                    "Tokens / hour by stage",
                    [
                        (
                            "3600 * sum by (stage, kind) "
                            f"(rate(memstream_llm_tokens_total{sel(TENANT)}[{RI}]))",
                            "{{stage}} {{kind}}",
                        )
                    ],
                    stacked=True,
                ),
                ts(
                    "Tokens / hour by model",
                    [
                        (
                            f"3600 * sum by (model) (rate(memstream_llm_tokens_total{sel(TENANT)}[{RI}]))",
                            "{{model}}",
                        )
                    ],
                    stacked=True,
                ),
                ts(
                    "Tokens, last 24 h, top tenants",
                    [
                        (
                            "topk(10, sum by (tenant) "
                            f"(increase(memstream_llm_tokens_total{sel(TENANT)}[24h])))",
                            "{{tenant}}",
                        )
                    ],
                    description="Compare with MEMSTREAM_LLM_DAILY_TOKEN_BUDGET "
                    "(per tenant, per worker, UTC day).",
                ),
                ts(
                    "LLM calls by stage and outcome",
                    [
                        (
                            f"sum by (stage, outcome) (rate(memstream_llm_calls_total{sel(TENANT)}[{RI}]))",
                            "{{stage}} {{outcome}}",
                        )
                    ],
                    "ops",
                    stacked=True,
                ),
                ts(
                    "LLM calls by model and tenant",
                    [
                        (
                            f"sum by (model) (rate(memstream_llm_calls_total{sel(TENANT)}[{RI}]))",
                            "{{model}}",
                        ),
                        (
                            f"topk(10, sum by (tenant) (rate(memstream_llm_calls_total{sel(TENANT)}[{RI}])))",
                            "tenant {{tenant}}",
                        ),
                    ],
                    "ops",
                ),
                ts(
                    "LLM latency and concurrency",
                    [
                        (quantile(0.5, "memstream_llm_seconds", "stage"), "p50 {{stage}} (s)"),
                        (quantile(0.95, "memstream_llm_seconds", "stage"), "p95 {{stage}} (s)"),
                        (f"sum(memstream_llm_in_flight{sel()})", "calls in flight"),
                    ],
                ),
                ts(
                    "Token budget refusals by tenant",
                    [
                        (
                            "sum by (tenant) (increase(memstream_llm_calls_total"
                            f"{sel(TENANT, BUDGET)}[{RI}]))",
                            "{{tenant}}",
                        )
                    ],
                    description="Calls refused because the tenant spent today's budget; the work waits for "
                    "the next UTC midnight.",
                    width=24,
                ),
            ],
        ),
        Row(
            "Recall and gateway",
            [
                ts(
                    "Recall latency (POST /v1/recall)",
                    [
                        (quantile(0.5, "memstream_gateway_request_seconds", "", RECALL), "p50"),
                        (quantile(0.95, "memstream_gateway_request_seconds", "", RECALL), "p95"),
                        (quantile(0.99, "memstream_gateway_request_seconds", "", RECALL), "p99"),
                    ],
                    "s",
                ),
                ts(
                    "Gateway requests by route and status",
                    [
                        (
                            f"sum by (route, status) (rate(memstream_gateway_requests_total{sel()}[{RI}]))",
                            "{{route}} {{status}}",
                        )
                    ],
                    "reqps",
                    stacked=True,
                ),
                ts(
                    "Gateway latency p95 by route",
                    [(quantile(0.95, "memstream_gateway_request_seconds", "route"), "{{route}}")],
                    "s",
                ),
                ts(
                    "Rate limited, shed, in flight, live updates, deletions",
                    [
                        (f"sum(rate(memstream_gateway_rate_limited_total{sel()}[{RI}]))", "429 rate limited"),
                        (
                            f"sum by (reason) (rate(memstream_gateway_shed_total{sel()}[{RI}]))",
                            "shed ({{reason}})",
                        ),
                        (f"sum(memstream_gateway_in_flight{sel()})", "requests in flight"),
                        (
                            f"sum(rate(memstream_gateway_updates_received_total{sel()}[{RI}]))",
                            "memory.updates read for SSE",
                        ),
                        (
                            f"sum by (tenant) (increase(memstream_users_deleted_total{sel(TENANT)}[{RI}]))",
                            "users deleted {{tenant}}",
                        ),
                    ],
                    width=24,
                ),
            ],
        ),
    ]


def _layout(sections: list[Row]) -> list[g.Panel]:
    """Rows stacked top to bottom; a row's panels fill 24 columns left to right."""
    panels: list[g.Panel] = []
    y = 0
    for row in sections:
        panels.append(g.RowPanel(title=row.title, gridPos=g.GridPos(h=1, w=24, x=0, y=y)))
        y += 1
        x, line = 0, 0
        for p in row.panels:
            w, h = p.gridPos.w, p.gridPos.h
            if x + w > 24:
                x, y = 0, y + line
                line = 0
            p.gridPos = g.GridPos(h=h, w=w, x=x, y=y)
            x += w
            line = max(line, h)
        y += line
        panels.extend(row.panels)
    return panels


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard's JSON model."""
    board = g.Dashboard(
        title="memstream",
        uid="memstream",
        description="memstream pipeline: ingest, consolidation by trigger, LLM calls and token spend by "
        "stage, model and tenant, lag, recall latency, dead letters. Generated by deploy/monitoring.py.",
        tags=["memstream"],
        timezone="utc",
        refresh="30s",
        time=g.Time("now-6h", "now"),
        graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        templating=g.Templating(
            [
                g.Template(
                    name="datasource",
                    label="Data source",
                    type="datasource",
                    query="prometheus",
                ),
                g.Template(
                    name="namespace",
                    label="Namespace",
                    query="label_values(memstream_turns_ingested_total, namespace)",
                    dataSource=DS,
                    includeAll=True,
                    multi=True,
                    allValue=".*",
                    refresh=2,
                ),
                g.Template(
                    name="tenant",
                    label="Tenant",
                    query="label_values(memstream_turns_ingested_total, tenant)",
                    dataSource=DS,
                    includeAll=True,
                    multi=True,
                    allValue=".*",
                    refresh=2,
                ),
            ]
        ),
        panels=_layout(rows()),
    ).auto_panel_ids()
    data: dict[str, Any] = json.loads(json.dumps(board.to_json_data(), cls=DashboardEncoder))
    return data


def expressions(board: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard model: panel targets and template queries."""
    out = [t["expr"] for p in board["panels"] for t in p.get("targets", []) if t.get("expr")]
    for var in board["templating"]["list"]:
        query = var.get("query")
        if var.get("type") == "query" and isinstance(query, str) and query:
            out.append(query)
    return out

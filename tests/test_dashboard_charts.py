"""The gateway's /dashboard charts (memstream/core/dashboard.py): what each line sums, and that
every chart draws a metric the product exports and the Grafana dashboard queries."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from deploy.monitoring import dashboard
from memstream.adapters import metrics  # noqa: F401  (registers the product's metrics)
from memstream.core.dashboard import ALL, CHARTS, Chart, chart_values, snapshot


def test_a_line_sums_every_source_and_every_other_label() -> None:
    samples = [
        ("memstream_turns_ingested_total", {"tenant": "a"}, 3.0),  # worker 1
        ("memstream_turns_ingested_total", {"tenant": "a"}, 4.0),  # worker 2
        ("memstream_turns_ingested_total", {"tenant": "b"}, 1.0),
        ("memstream_turns_ingested_created", {"tenant": "a"}, 1.7e9),  # not the counter
        ("memstream_consumer_lag", {"topic": "turns", "partition": "0"}, 5.0),
        ("memstream_consumer_lag", {"topic": "turns", "partition": "1"}, 2.0),
        ("memstream_gateway_shed_total", {"route": "/v1/recall", "reason": "key"}, 2.0),
        ("memstream_gateway_shed_total", {"route": "/v1/turns", "reason": "key"}, 1.0),
    ]
    values = chart_values(samples)
    assert values["ingest"] == {"a": 7.0, "b": 1.0}
    assert values["lag"] == {"turns": 7.0}
    assert values["shed"] == {"key": 3.0}
    assert chart_values(samples[:2])["shed"] == {}  # nothing shed: no line, not a made-up zero


@given(st.lists(st.tuples(st.sampled_from("xyz"), st.floats(0, 1e6)), max_size=20))
def test_one_line_charts_sum_everything(values: list[tuple[str, float]]) -> None:
    chart = Chart("c", "C", "m_total", None, rate=True)
    out = chart_values([("m_total", {"l": label}, v) for label, v in values], [chart])["c"]
    assert out == ({ALL: sum(v for _, v in values)} if values else {})
    assert abs(out.get(ALL, 0.0) - sum(v for _, v in values)) <= 1e-6 * max(1.0, sum(v for _, v in values))


def test_every_chart_draws_an_exported_metric_that_grafana_queries_too() -> None:
    # a counter's samples are exposed as its name + _total; a labelled gauge has none until set
    exported = {f.name + ("_total" if f.type == "counter" else "") for f in REGISTRY.collect()}
    grafana = json.dumps(dashboard())
    for chart in CHARTS:
        assert chart.metric in exported, chart.metric
        assert chart.metric.removesuffix("_total") in grafana, chart.metric


def test_a_snapshot_names_its_sources_and_every_chart() -> None:
    body = snapshot(12.5, [], reached=1, unreachable=2)
    assert body["at"] == 12.5 and body["sources"] == {"reached": 1, "unreachable": 2}
    assert [c["id"] for c in body["charts"]] == [c.id for c in CHARTS]
    assert all(c["values"] == {} for c in body["charts"])

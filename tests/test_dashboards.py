"""Every metric a dashboard panel or an alert queries is exported by the running code.

A real pipeline (`memstream up`: a worker and the gateway) runs against the test broker, with the
OpenAI-compatible test server as its LLM and a small daily token budget. Turns of the bundled
sample go in through the gateway's POST /v1/turns, one malformed record straight onto the turns
topic, then recalls, an answer and a DELETE go through the gateway. The worker's and the
gateway's /metrics are scraped and every metric name in deploy/monitoring.py's PromQL (dashboard
queries, template queries, alert expressions) must have samples there.

prometheus_client writes a labelled metric's HELP and TYPE lines from the start but samples only
once a label set is used; the run above uses every one of them, so "declared but never sampled"
is accepted only with the reason in DECLARED_ONLY."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy import monitoring
from memstream.adapters.broker import Broker, free_port
from memstream.adapters.kafka import partition_for, producer
from memstream.adapters.settings import Settings
from memstream.apps.demo import SAMPLE
from memstream.apps.status import fetch_status
from memstream.schemas.topics import TURNS
from memstream.testing.chat_responder import respond
from memstream.testing.openai_server import Failure, OpenAIServer
from tests.conftest import Pipeline, make_pipeline, ready, wait_for

pytestmark = pytest.mark.integration

KEY = "demo-key-0123456789abcdef"
USERS = ("user-0002", "user-0003")
METRIC = re.compile(r"\bmemstream_[a-z0-9_]+\b")
# Metrics a dashboard or alert may query that this run cannot make the code sample, with why.
DECLARED_ONLY: dict[str, str] = {
    "memstream_gateway_shed_total": "this run sheds nothing; tests/test_admission.py and "
    "tests/test_load_shedding.py shed and scrape it",
}


@dataclass
class Scrape:
    worker: str
    gateway: str
    worker_ready: tuple[int, dict[str, Any]]
    turns: int

    def samples(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Sample name -> (labels, value) over both processes."""
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for text in (self.worker, self.gateway):
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    out.setdefault(s.name, []).append((s.labels, s.value))
        return out

    def declared(self) -> dict[str, str]:
        """Metric family name -> type, from the HELP/TYPE lines (with or without samples)."""
        return {
            f.name: f.type
            for text in (self.worker, self.gateway)
            for f in text_string_to_metric_families(text)
        }


def _children(pid: int) -> list[int]:
    """Process ids whose parent is ``pid`` (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _turns() -> list[dict[str, Any]]:
    turns = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    return [t for t in turns if t["user_id"] in USERS]


def _status(settings: Settings) -> dict[str, Any]:
    try:
        return fetch_status(settings)
    except OSError:
        return {}


def _total(status: dict[str, Any], name: str, suffix: str = "") -> float:
    return sum(v for k, v in status.get(name, {}).items() if k.endswith(suffix))


@pytest.fixture(scope="module")
def scrape(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrape]:
    tmp = tmp_path_factory.mktemp("dashboards")
    port = free_port()
    turns = _turns()
    with OpenAIServer() as llm:
        llm.chat_responder = respond
        llm.fail(Failure(500))  # one failed attempt, retried: the retry outcome and its latency
        pipeline: Pipeline = make_pipeline(
            broker,
            tmp,
            MEMSTREAM_GATEWAY_PORT=str(port),
            MEMSTREAM_API_KEYS=json.dumps({KEY: "default"}),
            MEMSTREAM_LLM_BASE_URL=llm.base_url,
            MEMSTREAM_LLM_MODEL="test-model",
            MEMSTREAM_LLM_MAX_RETRIES="2",
            MEMSTREAM_LLM_BACKOFF_BASE_S="0.01",
            # small enough that the tenant spends it during the run: budget refusals are counted
            MEMSTREAM_LLM_DAILY_TOKEN_BUDGET="6000",
        ).start()
        settings = pipeline.settings
        url = f"http://127.0.0.1:{port}"
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60.0)
        try:
            wait_for(lambda: ready(url), 180, f"the gateway to be ready\n{pipeline.logs()}")
            for i in range(0, len(turns), 200):
                r = client.post("/v1/turns", json={"turns": turns[i : i + 200]})
                assert r.status_code == 202, r.text

            async def malformed_and_misplaced() -> None:
                async with producer(settings) as p:
                    topic = settings.kafka.topic(TURNS.name)
                    await p.send_and_wait(topic, b"{not json", key=b"default/user-0002")
                    # A turn on a partition other than its key's, as another client's partitioner
                    # would place it: forwarded, and counted.
                    stray = {**turns[0], "tenant": "default", "turn_id": "misplaced-1"}
                    key = f"default/{stray['user_id']}".encode()
                    n = settings.kafka.topic_partitions
                    elsewhere = (partition_for(key, n) + 1) % n
                    await p.send_and_wait(topic, json.dumps(stray).encode(), key=key, partition=elsewhere)

            asyncio.run(malformed_and_misplaced())

            def busy() -> dict[str, Any] | None:
                s = _status(settings)
                done = (
                    _total(s, "memstream_turns_ingested") >= len(turns)
                    and _total(s, "memstream_dead_letters") >= 1
                    and _total(s, "memstream_turns_rerouted") >= 1
                    and _total(s, "memstream_windows_closed") > 0
                    and _total(s, "memstream_consolidations", "/done") > 0
                    and _total(s, "memstream_llm_calls", "/ok") > 0
                    and _total(s, "memstream_llm_calls", "/budget") > 0
                    and bool(s.get("lag"))  # the lag gauge is set every 5 s by a timer
                )
                return s if done else None

            wait_for(busy, 240, f"turns, windows, consolidation and the token budget\n{pipeline.logs()}")
            for query in ("Where am I moving to?", "What did I cook?", "How is the training going?"):
                r = client.post("/v1/recall", json={"user_id": USERS[0], "query": query})
                assert r.status_code == 200, r.text
            assert (
                client.post("/v1/answer", json={"user_id": USERS[0], "query": "moving?"}).status_code == 200
            )
            assert client.delete(f"/v1/users/{USERS[1]}").status_code == 200
            worker_url = f"http://127.0.0.1:{settings.worker.metrics_port}"
            ready_r = httpx.get(f"{worker_url}/readyz", timeout=10)
            yield Scrape(
                worker=httpx.get(f"{worker_url}/metrics", timeout=10).text,
                gateway=client.get("/metrics").text,
                worker_ready=(ready_r.status_code, ready_r.json()),
                turns=len(turns),
            )
        finally:
            client.close()
            # `memstream up` runs the worker and the gateway as child processes. The worker holds
            # a budget-deferred record until UTC midnight and does not finish a graceful stop in
            # time; the fixture kills `up` after 30 s, which would leave the worker orphaned.
            children = _children(pipeline.proc.pid) if pipeline.proc else []
            pipeline.stop()
            for pid in children:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _queried() -> dict[str, list[str]]:
    """Metric sample name -> where it is queried (panel titles, alert names)."""
    out: dict[str, list[str]] = {}
    board = monitoring.dashboard()
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            for name in METRIC.findall(target["expr"]):
                out.setdefault(name, []).append(f"panel {panel['title']!r}")
    for var in board["templating"]["list"]:
        for name in METRIC.findall(str(var.get("query") or "")):
            out.setdefault(name, []).append(f"variable ${var['name']}")
    for alert in monitoring.ALERTS:
        for name in METRIC.findall(alert.expr):
            out.setdefault(name, []).append(f"alert {alert.name}")
    return out


def test_every_metric_the_dashboard_and_alerts_query_is_exported_with_samples(scrape: Scrape) -> None:
    queried = _queried()
    samples = scrape.samples()
    assert len(queried) >= 25
    missing = {name: where for name, where in queried.items() if name not in samples}
    assert set(missing) == set(DECLARED_ONLY), f"queried but not exported: {missing}"
    declared = scrape.declared()
    for name in DECLARED_ONLY:  # at least declared, with HELP and TYPE lines
        assert re.sub(r"_(total|bucket|sum|count)$", "", name) in declared, name


def test_the_exported_metrics_are_the_types_the_queries_assume(scrape: Scrape) -> None:
    declared = scrape.declared()
    for name in _queried():
        if name.endswith("_total"):
            assert declared[name[: -len("_total")]] == "counter", name
        elif name.endswith(("_bucket", "_sum", "_count")):
            assert declared[name.rsplit("_", 1)[0]] == "histogram", name
        else:
            assert declared[name] == "gauge", name


def test_the_run_produced_what_the_panels_show(scrape: Scrape) -> None:
    samples = scrape.samples()

    def total(name: str, **labels: str) -> float:
        return sum(v for lab, v in samples.get(name, []) if labels.items() <= lab.items())

    # The gateway's turns and the misplaced one produced directly, forwarded once.
    assert total("memstream_turns_ingested_total", tenant="default") == scrape.turns + 1
    assert total("memstream_turns_rerouted_total") == 1
    assert total("memstream_gateway_turns_accepted_total", tenant="default") == scrape.turns
    assert total("memstream_dead_letters_total", stage="decode", reason="malformed_json") == 1
    assert total("memstream_gateway_request_seconds_count", route="/v1/recall") == 3
    assert total("memstream_llm_calls_total", outcome="budget", tenant="default") > 0
    assert total("memstream_llm_calls_total", outcome="retry") >= 1
    assert total("memstream_llm_tokens_total", tenant="default", model="test-model") > 0
    assert total("memstream_consolidations_total", outcome="deferred") > 0  # the budget deferred work
    triggers = {lab["trigger"] for lab, v in samples["memstream_consolidations_total"] if v > 0}
    assert "session" in triggers
    assert total("memstream_users_deleted_total", tenant="default") == 1
    partitions = {lab["partition"] for lab, _ in samples["memstream_consumer_lag"]}
    assert partitions == {"0", "1"}


def test_a_running_worker_is_ready_with_its_partitions(scrape: Scrape) -> None:
    status, body = scrape.worker_ready
    assert status == 200
    assert body == {"ready": True, "partitions": [0, 1]}

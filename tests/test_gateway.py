"""The query gateway over real HTTP: `memstream up` (two workers on the embedded store, the
gateway started by it) against the real broker, a second gateway replica with a tight rate limit,
httpx as the client, and schemathesis against the OpenAPI document."""

from __future__ import annotations

import asyncio
import http.server
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from mcp.client.client import Client as McpClient
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from schemathesis.specs.openapi.checks import positive_data_acceptance
from starlette.testclient import TestClient

from memstream.adapters.broker import Broker, free_port
from memstream.adapters.kafka import consumed, partition_for, read_topic, settled
from memstream.adapters.settings import Settings
from memstream.apps.demo import SAMPLE
from memstream.apps.gateway.app import create_app
from memstream.apps.status import fetch_status
from memstream.client import (
    AsyncMemoryClient,
    AuthenticationError,
    InvalidRequest,
    LiveEvent,
    MemoryClient,
    NotFound,
    RateLimited,
)
from memstream.schemas.events import Tombstone, partition_key
from memstream.schemas.tools import TOOLS
from memstream.schemas.topics import TOMBSTONES
from memstream.testing.chat_responder import respond
from memstream.testing.openai_server import OpenAIServer
from tests.conftest import Pipeline, make_pipeline, ready, terminate, wait_for

pytestmark = pytest.mark.integration

KEY_ACME = "acme-key-0123456789abcdef"
KEY_GLOBEX = "globex-key-0123456789abcdef"
KEYS = json.dumps({KEY_ACME: "acme", KEY_GLOBEX: "globex"})
USER = "user-0002"


def _turns(user: str) -> list[dict[str, Any]]:
    out = []
    for line in SAMPLE.read_text().splitlines():
        turn = json.loads(line)
        if turn["user_id"] == user:
            turn.pop("tenant")
            out.append(turn)
    return out


ACME_TURNS = _turns(USER)
# globex has a user with the same id and someone else's conversation: only the tenant separates them.
GLOBEX_TURNS = [{**t, "user_id": USER} for t in _turns("user-0003")]


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class Gateway:
    def __init__(self, pipeline: Pipeline, url: str, replica_url: str, llm: OpenAIServer) -> None:
        self.pipeline = pipeline
        self.url = url
        self.replica_url = replica_url
        self.llm = llm

    def client(self, key: str | None = KEY_ACME, url: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=url or self.url, headers=_auth(key) if key else {}, timeout=httpx.Timeout(60.0)
        )


class _Updates(threading.Thread):
    """An SSE client reading a user's updates until five memory events (or a time limit)."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(daemon=True)
        self.url, self.key = url, key
        self.events: list[dict[str, Any]] = []
        self.connected = threading.Event()

    def run(self) -> None:
        with (
            httpx.Client(timeout=httpx.Timeout(180.0)) as c,
            c.stream("GET", self.url, headers=_auth(self.key)) as r,
        ):
            assert r.headers["content-type"].startswith("text/event-stream")
            for line in r.iter_lines():
                if line.startswith(": connected"):
                    self.connected.set()
                if line.startswith("data: "):
                    self.events.append(json.loads(line[6:]))
                    if len(self.events) == 5:
                        return


@pytest.fixture(scope="module")
def gateway(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gateway")
    port, replica_port = free_port(), free_port()
    pipeline = make_pipeline(
        broker,
        tmp,
        MEMSTREAM_WORKERS="2",
        MEMSTREAM_GATEWAY_PORT=str(port),
        MEMSTREAM_API_KEYS=KEYS,
        MEMSTREAM_RATE_LIMIT_PER_S="1000",
        MEMSTREAM_RATE_LIMIT_BURST="1000",
    ).start()
    # A second replica: stateless, so it serves the same data; its rate limit is tight, and it
    # answers with a chat model (the OpenAI-compatible test server).
    llm = OpenAIServer().__enter__()
    llm.chat_responder = respond
    replica_env = {
        **pipeline.env,
        "MEMSTREAM_WORKERS": "2",
        "MEMSTREAM_RATE_LIMIT_PER_S": "1",
        "MEMSTREAM_RATE_LIMIT_BURST": "3",
        "MEMSTREAM_LLM_BASE_URL": llm.base_url,
        "MEMSTREAM_LLM_MODEL": "test-model",
    }
    replica = subprocess.Popen(
        [sys.executable, "-m", "memstream.apps.cli", "gateway", "--port", str(replica_port)],
        env=replica_env,
        stdout=(tmp / "replica.log").open("ab"),
        stderr=subprocess.STDOUT,
    )
    gw = Gateway(pipeline, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{replica_port}", llm)

    try:
        wait_for(lambda: ready(gw.url) and ready(gw.replica_url), 180, "both gateways to be ready")
        yield gw
    finally:
        terminate(replica)
        pipeline.stop()
        llm.__exit__(None, None, None)


@pytest.fixture(scope="module")
def ingested(gateway: Gateway) -> dict[str, Any]:
    """Both tenants' conversations posted through the gateway and consolidated; an SSE client
    listening to the acme user the whole time."""
    updates = _Updates(f"{gateway.url}/v1/users/{USER}/updates", KEY_ACME)
    updates.start()
    assert updates.connected.wait(30), "the SSE stream did not open"
    with gateway.client(KEY_ACME) as acme, gateway.client(KEY_GLOBEX) as globex:
        r = acme.post("/v1/turns", json={"turns": ACME_TURNS})
        assert r.status_code == 202, r.text
        accepted = r.json()
        assert accepted["accepted"] == len(ACME_TURNS)
        assert accepted["turn_ids"] == [t["turn_id"] for t in ACME_TURNS]
        assert len(set(accepted["content_hashes"])) == len(ACME_TURNS)
        for turn in GLOBEX_TURNS:  # one at a time: the single-turn body
            assert globex.post("/v1/turns", json=turn).status_code == 202
        # Idempotent by turn_id: the same batch again changes nothing.
        assert acme.post("/v1/turns", json={"turns": ACME_TURNS[:20]}).status_code == 202
    settings = gateway.pipeline.settings
    total = len(ACME_TURNS) + len(GLOBEX_TURNS)
    wait_for(lambda: fetch_status(settings)["units_in_store"] >= total, 120, "every turn to be stored")
    wait_for(
        lambda: fetch_status(settings).get("memstream_windows_closed", {}).get("session/idle", 0) >= 2,
        60,
        "idle sessions to close",
    )
    wait_for(lambda: asyncio.run(settled(settings)), 180, "consolidation to settle")
    updates.join(60)
    return {"units": fetch_status(settings)["units_in_store"], "updates": updates.events, "total": total}


def test_turns_are_logged_once_and_an_sse_client_sees_consolidation(ingested: dict[str, Any]) -> None:
    assert ingested["units"] == ingested["total"]  # the re-posted batch was not stored again
    assert ingested["updates"], "no memory update reached the SSE client"
    for update in ingested["updates"]:  # globex's user of the same id was consolidated meanwhile
        assert update["tenant"] == "acme" and update["user_id"] == USER
        assert update["op"] in ("upsert", "invalidate")


def test_recall_returns_the_users_dated_memories_with_provenance(
    gateway: Gateway, ingested: dict[str, Any]
) -> None:
    with gateway.client() as c:
        r = c.post(
            "/v1/recall", json={"user_id": USER, "query": "Where am I moving to?", "budget_tokens": 500}
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["items"]
    assert body["tokens"] == math.ceil(len(body["context"]) / 4) <= 500  # what is rendered fits the budget
    kinds = {i["kind"] for i in body["items"]}
    assert kinds & {"unit", "episode", "fact", "session", "day", "week", "profile"}
    acme_ids = {t["turn_id"] for t in ACME_TURNS}
    for item in body["items"]:
        # What the text carries, within what the item covers (a node: its whole subtree).
        assert (
            item["source_turn_ids"]
            and set(item["source_turn_ids"]) <= set(item["covers_turn_ids"]) <= acme_ids
        )
        assert item["dialogue_time"] and item["event_start"]
    headers = [line for line in body["context"].splitlines() if re.fullmatch(r"\[[^\]]*\]", line)]
    assert len(body["context"].splitlines()) == len(body["items"]) + len(headers)  # leaves under their day
    assert "2025" in body["context"]  # dated

    with gateway.client() as c:
        leaves = c.post("/v1/recall", json={"user_id": USER, "query": "moving", "levels": [1]}).json()
    assert leaves["items"] and {i["level"] for i in leaves["items"]} == {1}


class _CountingProxy(http.server.ThreadingHTTPServer):
    """In front of a worker: forwards its ``/status`` (naming itself as the worker's internal port) and
    the store and recall calls (to the internal port, token and all), and counts them by path."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.internal = ""  # the worker's internal port, from its /status
        self.requests: Counter[str] = Counter()
        self.client = httpx.Client(timeout=30)
        super().__init__(("127.0.0.1", 0), _Forward)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        self.client.close()


class _Forward(http.server.BaseHTTPRequestHandler):
    server: _CountingProxy

    def _forward(self) -> None:
        self.server.requests[self.path] += 1
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        target = self.server.target if self.command == "GET" else self.server.internal
        auth = {"Authorization": self.headers["Authorization"]} if "Authorization" in self.headers else {}
        r = self.server.client.request(self.command, f"{target}{self.path}", content=body, headers=auth)
        out = r.content
        if self.path == "/status":
            status = r.json()
            self.server.internal = f"http://127.0.0.1:{status['internal_port']}"
            out = json.dumps({**status, "internal_port": self.server.server_address[1]}).encode()
        self.send_response(r.status_code)
        self.send_header("content-type", r.headers.get("content-type", "application/json"))
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _forward

    def log_message(self, format: str, *args: object) -> None:
        return None


def test_a_recall_is_one_request_to_the_worker(gateway: Gateway, ingested: dict[str, Any]) -> None:
    """With the embedded store the worker holding the user's shard runs the whole recall: one HTTP
    request from the gateway (an in-process gateway whose workers are behind counting proxies), and
    the answer is the one the other gateways give."""
    settings = gateway.pipeline.settings
    proxies = [_CountingProxy(f"http://127.0.0.1:{settings.worker.metrics_port + i}") for i in range(2)]
    env = {**gateway.pipeline.env, "MEMSTREAM_WORKER_URLS": ",".join(p.url for p in proxies)}
    query = {"user_id": USER, "query": "What did I do last week?", "now": "2025-03-01T12:00:00Z"}
    partition = partition_for(partition_key("acme", USER).encode(), settings.kafka.topic_partitions)
    try:
        with TestClient(create_app(Settings.from_env(env)), headers=_auth(KEY_ACME)) as c:
            first = c.post("/v1/recall", json=query)  # also finds the owner (the workers' /status)
            for p in proxies:
                p.requests.clear()
            second = c.post("/v1/recall", json=query)
    finally:
        for p in proxies:
            p.close()
    assert first.status_code == second.status_code == 200, second.text
    assert sum((p.requests for p in proxies), Counter()) == {f"/recall/{partition}": 1}
    with gateway.client() as c:
        assert second.json() == first.json() == c.post("/v1/recall", json=query).json()
    assert second.json()["items"]


def test_answer_without_a_model_says_so_and_returns_the_context(
    gateway: Gateway, ingested: dict[str, Any]
) -> None:
    with gateway.client() as c:
        r = c.post("/v1/answer", json={"user_id": USER, "query": "Where am I moving to?"})
    assert r.status_code == 200
    body = r.json()
    assert body["answer"] is None and body["answered_by"] is None
    assert "no model answered" in body["note"]
    assert body["recall"]["context"]


def test_answer_with_a_model_reasons_over_the_dated_context(
    gateway: Gateway, ingested: dict[str, Any]
) -> None:
    with gateway.client(KEY_GLOBEX, url=gateway.replica_url) as c:
        r = c.post("/v1/answer", json={"user_id": USER, "query": "What did I do at work?"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answered_by"] == "test-model" and body["answer"].startswith("From memory:")
    path, request = gateway.llm.requests[-1]
    assert path.endswith("/chat/completions")
    prompt = request["messages"][-1]["content"]
    assert body["recall"]["context"] in prompt  # the dated context, fenced as data
    assert "<data>" in prompt and "What did I do at work?" in prompt


def test_tools_are_listed_as_openai_schemas_and_run(gateway: Gateway, ingested: dict[str, Any]) -> None:
    with gateway.client() as c:
        tools = c.get("/v1/tools").json()
        names = {t["function"]["name"] for t in tools}
        assert names == {
            "semantic_retrieve",
            "lexical_retrieve",
            "find_memory_contexts",
            "find_entity_contexts",
        }
        for tool in tools:
            assert tool["type"] == "function" and tool["function"]["parameters"]["type"] == "object"
        sem = c.post("/v1/tools/semantic_retrieve", json={"user_id": USER, "arguments": {"query": "kitchen"}})
        lex = c.post("/v1/tools/lexical_retrieve", json={"user_id": USER, "arguments": {"query": "kitchen"}})
        facts = c.post(
            "/v1/tools/find_entity_contexts", json={"user_id": USER, "arguments": {"aggregate": "count"}}
        )
        assert sem.status_code == lex.status_code == facts.status_code == 200
        assert sem.json()["items"] and lex.json()["items"]
        assert facts.json()["count"] > 0
        node = next(i for i in sem.json()["items"] if i["kind"] != "unit" or True)
        timeline = c.get(f"/v1/users/{USER}/timeline").json()["nodes"]
        assert timeline and all(n["level"] >= 2 for n in timeline)
        ctx = c.post(
            "/v1/tools/find_memory_contexts",
            json={"user_id": USER, "arguments": {"memory_id": timeline[0]["id"]}},
        )
        assert ctx.status_code == 200, ctx.text
        assert node["id"]
        assert c.post("/v1/tools/nope", json={"user_id": USER}).status_code == 404
        bad = c.post("/v1/tools/semantic_retrieve", json={"user_id": USER, "arguments": {"limit": 5}})
        assert bad.status_code == 422  # query missing


def test_every_endpoint_is_scoped_to_the_key_tenant(gateway: Gateway, ingested: dict[str, Any]) -> None:
    acme_ids = {t["turn_id"] for t in ACME_TURNS}
    globex_ids = {t["turn_id"] for t in GLOBEX_TURNS}
    for key, mine, theirs in ((KEY_ACME, acme_ids, globex_ids), (KEY_GLOBEX, globex_ids, acme_ids)):
        seen = _everything_visible(gateway, key)
        assert seen & mine, "the tenant sees none of its own data"
        assert not seen & theirs, "another tenant's turns leaked"
    with gateway.client(None) as anon:
        assert anon.post("/v1/recall", json={"user_id": USER, "query": "x"}).status_code == 401
    with gateway.client("not-a-key-0123456789") as wrong:
        assert wrong.get(f"/v1/users/{USER}/timeline").status_code == 401
    with gateway.client(KEY_GLOBEX) as globex:
        turn = {**ACME_TURNS[0], "tenant": "acme"}
        assert globex.post("/v1/turns", json=turn).status_code == 403


def _everything_visible(gateway: Gateway, key: str, user: str = USER) -> set[str]:
    """Every turn id any read endpoint shows ``key`` for ``user``."""
    seen: set[str] = set()
    with gateway.client(key) as c:
        for query in ("moving kitchen", "work", "weather"):
            r = c.post("/v1/recall", json={"user_id": user, "query": query, "budget_tokens": 4000})
            seen |= {t for i in r.json()["items"] for t in i["source_turn_ids"]}
            for tool in ("semantic_retrieve", "lexical_retrieve"):
                r = c.post(
                    f"/v1/tools/{tool}", json={"user_id": user, "arguments": {"query": query, "limit": 100}}
                )
                seen |= {t for i in r.json()["items"] for t in i["source_turn_ids"]}
            r = c.post("/v1/answer", json={"user_id": user, "query": query})
            seen |= {t for i in r.json()["recall"]["items"] for t in i["source_turn_ids"]}
        r = c.post("/v1/tools/find_entity_contexts", json={"user_id": user, "arguments": {"limit": 200}})
        seen |= {t for i in r.json()["items"] for t in i["source_turn_ids"]}
        for node in c.get(f"/v1/users/{user}/timeline", params={"min_level": 1}).json()["nodes"]:
            ctx = c.post(
                "/v1/tools/find_memory_contexts",
                json={"user_id": user, "arguments": {"memory_id": node["id"]}},
            )
            seen |= {t for i in ctx.json()["items"] for t in i["source_turn_ids"]}
    return seen


def test_the_replica_serves_the_same_data_and_rate_limits_per_key(
    gateway: Gateway, ingested: dict[str, Any]
) -> None:
    query = {"user_id": USER, "query": "Where am I moving to?", "budget_tokens": 300}
    with gateway.client() as one, gateway.client(url=gateway.replica_url) as two:
        a, b = one.post("/v1/recall", json=query).json(), two.post("/v1/recall", json=query).json()
        assert [i["id"] for i in a["items"]] == [i["id"] for i in b["items"]]
        codes = [two.post("/v1/recall", json=query).status_code for _ in range(8)]
        assert 429 in codes
        limited = next(
            r for r in (two.post("/v1/recall", json=query) for _ in range(3)) if r.status_code == 429
        )
        assert int(limited.headers["Retry-After"]) >= 1
    with gateway.client(KEY_GLOBEX, url=gateway.replica_url) as other:  # another key: its own bucket
        assert other.post("/v1/recall", json=query).status_code == 200


def _logs(gateway: Gateway) -> str:
    """Everything both gateways and the workers have logged so far, after a moment to flush."""
    time.sleep(1)
    log = gateway.pipeline.log
    return log.read_text(errors="replace") + (log.parent / "replica.log").read_text(errors="replace")


def _assert_not_logged(gateway: Gateway, *sent: str) -> None:
    logs = _logs(gateway)
    assert "gateway" in logs  # the gateway did log (its start-up), so an absence below means something
    leaked = [s for s in sent if s in logs]
    assert not leaked, leaked


def test_bad_requests_get_clear_errors(gateway: Gateway) -> None:
    marker = "bad-request-marker-2f8a"
    with gateway.client() as c:
        r = c.post("/v1/turns", json={**ACME_TURNS[0], "metadata": {"note": marker}, "messages": []})
        assert r.status_code == 422 and "messages" in r.text
        r = c.post("/v1/turns", content=b"x" * 5_000_000, headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert c.post("/v1/recall", json={"user_id": USER, "query": ""}).status_code == 422
        r = c.post("/v1/recall", content=b'{"user_id": "u", "query": "' + marker.encode() + b" not json")
        assert r.status_code == 422
        assert c.get("/metrics").text.count("memstream_gateway_requests_total") > 0
    _assert_not_logged(gateway, marker)


CHAT = [
    {"role": "user", "content": "I adopted a greyhound called Pixel last Sunday.", "name": "Dana"},
    {"role": "assistant", "content": "Congratulations on Pixel!"},
    {"role": "user", "content": "She already sleeps on the sofa."},
]


def test_a_messages_body_is_stored_once_however_often_it_is_retried(gateway: Gateway) -> None:
    """The shape chat APIs use, with every default: retried, it is stored once, and the stored
    turn is the one the first 202 named (the retry's default time differs)."""
    user = "chat-user-7"
    with gateway.client() as c:
        first = c.post("/v1/turns", json={"user_id": user, "messages": CHAT})
        assert first.status_code == 202, first.text
        ids = first.json()["turn_ids"]
        assert first.json()["accepted"] == 2 and len(set(ids)) == 2  # (user, assistant), then user
        wait_for(
            lambda: all(c.get(f"/v1/users/{user}/turns/{t}").status_code == 200 for t in ids), 60, "storage"
        )
        again = c.post("/v1/turns", json={"user_id": user, "messages": CHAT})
        assert again.status_code == 202 and again.json() == first.json()
        keyed = c.post(
            "/v1/turns", json={"user_id": user, "messages": CHAT[2:]}, headers={"Idempotency-Key": "k1"}
        )
        assert keyed.json()["turn_ids"] != ids[1:]  # another request: another turn, even with the same text
        stored = [c.get(f"/v1/users/{user}/turns/{t}").json() for t in ids]
        assert [s["content_hash"] for s in stored] == first.json()["content_hashes"]
        assert {s["session_id"] for s in stored} == {"chat"}
        recalled = c.post("/v1/recall", json={"user_id": user, "query": "greyhound Pixel"}).json()
        assert "Dana: I adopted a greyhound" in recalled["context"]
        assert "assistant: Congratulations" in recalled["context"]


def test_each_body_shape_gets_its_own_errors(gateway: Gateway) -> None:
    """One 422 per shape: a turn's errors name only the turn's fields, a messages body's only its own."""
    with gateway.client() as c:
        turn = c.post("/v1/turns", json={**ACME_TURNS[0], "ts": "not a time"})
        assert turn.status_code == 422
        assert [e["loc"] for e in turn.json()["detail"]] == [["body", "turn", "ts"]]
        chat = c.post("/v1/turns", json={"user_id": "u", "messages": [{"role": "system", "content": "x"}]})
        assert chat.status_code == 422
        assert [e["loc"] for e in chat.json()["detail"]] == [["body", "messages", "messages", 0, "role"]]
        nul = c.post(
            "/v1/turns", json={"user_id": "u", "messages": [{"role": "user", "content": "a\u0000b"}]}
        )
        assert nul.status_code == 422 and "NUL" in nul.text
        long_meta = {"note": "x" * 10_000}
        meta = c.post("/v1/turns", json={"user_id": "u", "messages": CHAT[:1], "metadata": long_meta})
        assert meta.status_code == 422 and meta.json()["detail"][0]["loc"][:2] == ["body", "messages"]
        batch = c.post("/v1/turns", json={"turns": []})
        assert [e["loc"] for e in batch.json()["detail"]] == [["body", "batch", "turns"]]


def test_the_openapi_document_declares_both_ways_to_send_a_key(gateway: Gateway) -> None:
    spec = httpx.get(f"{gateway.url}/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert (schemes["HTTPBearer"]["type"], schemes["HTTPBearer"]["scheme"]) == ("http", "bearer")
    assert schemes["APIKeyHeader"]["in"] == "header" and schemes["APIKeyHeader"]["name"] == "X-API-Key"
    recall = spec["paths"]["/v1/recall"]["post"]
    assert {"HTTPBearer": []} in recall["security"] and {"APIKeyHeader": []} in recall["security"]
    assert "security" not in spec["paths"]["/healthz"]["get"]


def test_the_dashboard_charts_this_gateway_and_every_worker_from_its_own_page(
    gateway: Gateway, ingested: dict[str, Any]
) -> None:
    page = httpx.get(f"{gateway.url}/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    # nothing from outside the gateway: no script, style or image named by a URL
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page.text)
    data = httpx.get(f"{gateway.url}/dashboard/data").json()
    assert data["sources"] == {"reached": 3, "unreachable": 0}  # this gateway and both workers
    charts = {c["id"]: c["values"] for c in data["charts"]}
    assert set(charts["ingest"]) == {"acme", "globex"}
    assert sum(charts["ingest"].values()) >= ingested["total"]
    assert charts["consolidation"].get("session", 0) >= 2  # the idle sessions, consolidated
    assert charts["lag"] and all(v >= 0 for v in charts["lag"].values())


def _chromium(url: str, tmp_path: Path, *extra: str) -> str:
    """The page's DOM after its scripts ran, in headless Chromium (flags for a machine without
    outside network: docs/operations.md); skipped where Chromium is not installed."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no Chromium here: `make browser-check` on a machine with it (apt install chromium)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    flags += [f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=8000"]
    run = subprocess.run(
        [chromium, *flags, *extra, url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


@pytest.mark.parametrize(
    ("path", "rendered"),
    [
        ("/docs", r'class="opblock opblock-post'),  # Swagger UI drew the operations
        ("/redoc", r"/v1/recall"),
        ("/dashboard", r'<figure id="chart-lag">.*<polyline'),  # a chart with its line
    ],
)
def test_the_docs_and_the_dashboard_render_offline_in_a_browser(
    gateway: Gateway, ingested: dict[str, Any], tmp_path: Path, path: str, rendered: str
) -> None:
    dom = _chromium(f"{gateway.url}{path}", tmp_path, "--dump-dom")
    assert re.search(rendered, dom, re.DOTALL), dom.split("<script")[0][-3000:]  # the page, not its code
    shot = os.environ.get("MEMSTREAM_SCREENSHOTS")  # `make browser-check` keeps them
    if shot:
        name = Path(shot) / f"{path.strip('/')}.png"
        _chromium(f"{gateway.url}{path}", tmp_path, f"--screenshot={name}", "--window-size=1280,900")


def test_the_python_client_adds_recalls_runs_tools_and_forgets(gateway: Gateway) -> None:
    user = "client-user-1"
    with MemoryClient(gateway.url, api_key=KEY_ACME) as memory:
        accepted = memory.add(user, CHAT, idempotency_key="client-1")
        assert accepted.accepted == 2
        wait_for(lambda: _stored(memory, user, accepted.turn_ids), 60, "the client's turns to be stored")
        found = memory.recall(user, "Which dog did I adopt?", budget_tokens=300)
        assert "greyhound called Pixel" in found.context and found.tokens <= 300
        assert any(set(i.source_turn_ids) & set(accepted.turn_ids) for i in found.items)
        assert {t["function"]["name"] for t in memory.tools()} == set(TOOLS)
        assert memory.tool("semantic_retrieve", user, query="greyhound").items
        assert memory.timeline(user).user_id == user
        assert memory.forget(user).units == 2
        with pytest.raises(NotFound) as gone:
            memory.turn(user, accepted.turn_ids[0])
        assert "no turn stored" in gone.value.detail


def test_the_python_client_raises_the_servers_reason_and_retries_429(gateway: Gateway) -> None:
    with MemoryClient(gateway.url, api_key="not-a-key-0123456789") as stranger:
        with pytest.raises(AuthenticationError) as denied:
            stranger.recall(USER, "anything")
        assert denied.value.status == 401 and "API key" in denied.value.detail
    with MemoryClient(gateway.url, api_key=KEY_ACME) as memory:
        with pytest.raises(InvalidRequest) as bad:
            memory.add("u", [{"role": "system", "content": "x"}])
        assert bad.value.status == 422 and bad.value.detail[0]["loc"][-1] == "role"
    # The replica allows 1 request/s after a burst of 3: with no retries the 429 surfaces, with
    # them the client waits the server's Retry-After and gets through.
    with MemoryClient(gateway.replica_url, api_key=KEY_ACME, retries=0) as hasty:
        with pytest.raises(RateLimited) as limited:
            for _ in range(10):
                hasty.timeline(USER)
        assert limited.value.retry_after is not None and limited.value.retry_after >= 1
    with MemoryClient(gateway.replica_url, api_key=KEY_ACME, retries=5) as patient:
        assert all(patient.timeline(USER).user_id == USER for _ in range(6))


def test_the_async_client_has_the_same_verbs(gateway: Gateway) -> None:
    async def session() -> None:
        async with AsyncMemoryClient(gateway.url, api_key=KEY_ACME) as memory:
            user = "client-user-2"
            accepted = await memory.add(user, CHAT[:2])

            async def stored() -> bool:
                try:
                    await memory.turn(user, accepted.turn_ids[0])
                except NotFound:
                    return False
                return True

            for _ in range(120):
                if await stored():
                    break
                await asyncio.sleep(0.5)
            found = await memory.recall(user, "greyhound", budget_tokens=200)
            assert "Pixel" in found.context
            assert (await memory.forget(user)).units == 1

    asyncio.run(session())


def test_memories_are_listed_by_page_read_with_provenance_and_deleted_one_by_one(
    gateway: Gateway, ingested: dict[str, Any]
) -> None:
    with MemoryClient(gateway.url, api_key=KEY_ACME) as memory:
        paged = list(memory.memories(USER, limit=7))
        assert len({m.memory_id for m in paged}) == len(paged) > 7  # several pages, no repeats
        assert {m.tenant for m in paged} == {"acme"} and {m.user_id for m in paged} == {USER}
        sessions = list(memory.memories(USER, kind="session"))
        assert sessions and {m.level for m in sessions} == {2}
        assert list(memory.memories(USER, level=2)) == sessions
        one = next(m for m in paged if m.source_turn_ids)
        assert memory.memory(one.memory_id) == one
        assert set(one.source_turn_ids) <= {t["turn_id"] for t in ACME_TURNS}
        victim = next(m for m in paged if m.kind.value not in ("session", "day", "week"))
        with MemoryClient(gateway.url, api_key=KEY_GLOBEX) as other:  # another tenant's memory: not found
            with pytest.raises(NotFound):
                other.memory(victim.memory_id)
            with pytest.raises(NotFound):
                other.delete_memory(victim.memory_id)
        assert memory.delete_memory(victim.memory_id).memory_id == victim.memory_id
        wait_for(lambda: _gone(memory, victim.memory_id), 30, "the deleted memory to be gone")
        assert len(list(memory.memories(USER))) == len(paged) - 1
        with pytest.raises(InvalidRequest):
            memory.memory("not-a-memory-id")


def test_an_mcp_client_lists_the_tools_adds_and_recalls_over_stdio(gateway: Gateway) -> None:
    """The official MCP SDK's client against `memstream mcp` over stdio, under acme's key."""
    env = {**os.environ, "MEMSTREAM_GATEWAY_URL": gateway.url, "MEMSTREAM_API_KEY": KEY_ACME}
    server = StdioServerParameters(command=sys.executable, args=["-m", "memstream.apps.cli", "mcp"], env=env)

    async def session() -> None:
        async with McpClient(server) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
            assert names == {"add_memory", "recall", "forget", *TOOLS}
            added = await mcp.call_tool("add_memory", {"user_id": "mcp-user-1", "messages": CHAT[:2]})
            assert not added.is_error and added.structured_content["accepted"] == 1
            for _ in range(120):
                found = await mcp.call_tool("recall", {"user_id": "mcp-user-1", "query": "greyhound"})
                if "Pixel" in found.structured_content["context"]:
                    break
                await asyncio.sleep(0.5)
            assert "greyhound called Pixel" in found.structured_content["context"]
            tool = await mcp.call_tool(
                "lexical_retrieve", {"user_id": "mcp-user-1", "arguments": {"query": "greyhound"}}
            )
            assert not tool.is_error and tool.structured_content["items"]
            bad = await mcp.call_tool("add_memory", {"user_id": "a/b", "messages": CHAT[:1]})
            assert bad.is_error and "422" in bad.content[0].text  # the gateway's reason reaches the agent

    asyncio.run(session())
    with gateway.client(KEY_GLOBEX) as other:  # stored under the key's tenant only
        assert other.get("/v1/users/mcp-user-1/memories").json()["memories"] == []
        found = other.post("/v1/recall", json={"user_id": "mcp-user-1", "query": "greyhound"}).json()
        assert found["items"] == []


def test_an_mcp_client_over_http_is_served_under_its_own_key(gateway: Gateway, tmp_path: Path) -> None:
    """Streamable HTTP: the caller's key (not the server's) decides the tenant; no key, no memory."""
    port = free_port()
    env = {**os.environ, "MEMSTREAM_GATEWAY_URL": gateway.url}
    env.pop("MEMSTREAM_API_KEY", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "memstream.apps.cli", "mcp", "--transport", "http", "--port", str(port)],
        env=env,
        stdout=(tmp_path / "mcp.log").open("ab"),
        stderr=subprocess.STDOUT,
    )

    async def call(key: str | None) -> Any:
        headers = {"X-API-Key": key} if key else {}
        transport = streamable_http_client(
            f"http://127.0.0.1:{port}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=60)
        )
        async with McpClient(transport) as mcp:
            return await mcp.call_tool("add_memory", {"user_id": "mcp-user-2", "messages": CHAT[:2]})

    try:
        wait_for(lambda: _listening(port), 60, "memstream mcp to listen")
        added = asyncio.run(call(KEY_GLOBEX))
        assert not added.is_error and added.structured_content["accepted"] == 1
        refused = asyncio.run(call(None))
        assert refused.is_error and "401" in refused.content[0].text
    finally:
        terminate(server)
    with gateway.client(KEY_GLOBEX) as globex:
        turn = added.structured_content["turn_ids"][0]
        wait_for(lambda: globex.get(f"/v1/users/mcp-user-2/turns/{turn}").status_code == 200, 60, "storage")
    with gateway.client(KEY_ACME) as acme:
        assert acme.get(f"/v1/users/mcp-user-2/turns/{turn}").status_code == 404


def _listening(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
    except httpx.TransportError:
        return False
    return True


@pytest.mark.parametrize(
    ("example", "said", "asked"),
    [
        ("python_agent.py", "Porto half marathon on 14 March", "User: When is my race"),
        ("langchain_agent.py", "Kyoto with a set of matcha bowls", "Human: What did my sister bring back"),
    ],
)
def test_the_python_agent_examples_recall_what_they_were_told(
    gateway: Gateway, example: str, said: str, asked: str
) -> None:
    env = {**os.environ, "MEMSTREAM_GATEWAY_URL": gateway.url, "MEMSTREAM_API_KEY": KEY_ACME}
    done = subprocess.run(
        [sys.executable, f"examples/{example}"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert said in done.stdout and asked in done.stdout


def test_export_then_forget_then_replay_gives_the_same_recall(gateway: Gateway, tmp_path: Path) -> None:
    user, said = "export-user-1", datetime(2026, 2, 2, 19, 0, tzinfo=UTC)
    settings = gateway.pipeline.settings
    with MemoryClient(gateway.url, api_key=KEY_ACME) as memory:
        first = memory.add(user, CHAT, session_id="s1", ts=said)
        second = memory.add(user, CHAT[2:] + CHAT[:2], session_id="s2", ts=said + timedelta(days=1))
        wait_for(lambda: _stored(memory, user, first.turn_ids + second.turn_ids), 60, "storage")
        wait_for(lambda: asyncio.run(settled(settings)), 120, "consolidation to settle")
        before = memory.recall(
            user, "What is my dog called?", budget_tokens=300, now=said + timedelta(days=2)
        )
        exported = memory.export(user)
        lines = [json.loads(line) for line in exported.splitlines()]
        turns = [line for line in lines if "memory" not in line]
        assert [t["turn_id"] for t in turns] == first.turn_ids + second.turn_ids
        assert {line["memory"]["user_id"] for line in lines if "memory" in line} <= {user}
        (tmp_path / "export.jsonl").write_bytes(exported)
        memory.forget(user)
        with pytest.raises(NotFound):
            memory.turn(user, first.turn_ids[0])
        replayed = subprocess.run(
            [sys.executable, "-m", "memstream.apps.cli", "replay", str(tmp_path / "export.jsonl")],
            env=gateway.pipeline.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert replayed.returncode == 0 and f"produced {len(turns)} turns" in replayed.stdout, replayed.stderr
        wait_for(lambda: _stored(memory, user, first.turn_ids + second.turn_ids), 60, "the re-import")
        stored = [memory.turn(user, t) for t in first.turn_ids]
        assert [s.content_hash for s in stored] == first.content_hashes  # the same turns, not look-alikes
        wait_for(lambda: asyncio.run(settled(settings)), 120, "consolidation to settle")
        after = memory.recall(user, "What is my dog called?", budget_tokens=300, now=said + timedelta(days=2))
    assert after.context == before.context and "Pixel" in after.context
    assert [i.text for i in after.items] == [i.text for i in before.items]


TS_CLIENT = Path(__file__).parent.parent / "clients" / "typescript"


def _npm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["npm", *args], cwd=TS_CLIENT, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(shutil.which("npm") is None, reason="Node.js and npm are not installed")
def test_the_typescript_client_is_typed_from_the_served_document_and_its_agent_recalls(
    gateway: Gateway, tmp_path: Path
) -> None:
    served = httpx.get(f"{gateway.url}/openapi.json").json()
    assert json.loads((TS_CLIENT / "openapi.json").read_text()) == served, "run `make ts-client`"
    assert _npm("ci", "--no-audit", "--no-fund").returncode == 0
    generated = tmp_path / "openapi.ts"
    assert _npm("exec", "--", "openapi-typescript", "openapi.json", "-o", str(generated)).returncode == 0
    assert generated.read_text() == (TS_CLIENT / "src" / "openapi.ts").read_text(), "run `make ts-client`"
    built = _npm("run", "build")
    assert built.returncode == 0, (
        built.stdout + built.stderr
    )  # tsc --strict: the client and example type-check
    env = {**os.environ, "MEMSTREAM_GATEWAY_URL": gateway.url, "MEMSTREAM_API_KEY": KEY_ACME}
    done = subprocess.run(
        ["node", "dist/examples/agent.js"],
        cwd=TS_CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Porto half marathon on 14 March" in done.stdout and "User: When is my race" in done.stdout


class _Live(threading.Thread):
    """A MemoryClient.updates() reader in the background, until a `forgotten` event or its deadline."""

    def __init__(
        self, url: str, user: str, last_event_id: str | None = None, deadline_s: float = 150
    ) -> None:
        super().__init__(daemon=True)
        self.url, self.user, self.last_event_id, self.deadline = (
            url,
            user,
            last_event_id,
            time.time() + deadline_s,
        )
        self.events: list[LiveEvent] = []

    def run(self) -> None:
        with MemoryClient(self.url, api_key=KEY_ACME) as memory:
            for event in memory.updates(self.user, last_event_id=self.last_event_id):
                self.events.append(event)
                if event.kind == "forgotten" or time.time() > self.deadline:
                    return


def test_a_client_that_reconnects_with_last_event_id_misses_no_update(gateway: Gateway) -> None:
    user = "sse-user-1"
    whole = _Live(gateway.url, user)  # connected the whole time
    whole.start()
    time.sleep(1.0)
    with MemoryClient(gateway.url, api_key=KEY_ACME) as memory:
        memory.add(user, CHAT, session_id="s1")
        first = next(e for e in memory.updates(user) if e.kind == "memory")  # then the connection drops
        assert first.update is not None and first.update.user_id == user and first.id
        memory.add(
            user, [{"role": "user", "content": "Pixel learned to sit on command today."}], session_id="s2"
        )
        settings = gateway.pipeline.settings
        wait_for(lambda: asyncio.run(settled(settings)), 120, "consolidation to settle")
        wait_for(lambda: _after(whole.events, first.id), 60, "an update the dropped client missed")
        resumed = _Live(gateway.url, user, last_event_id=first.id)
        resumed.start()
        time.sleep(3.0)  # the replay, then live
        memory.forget(user)
    whole.join(60)
    resumed.join(60)
    assert [e.kind for e in whole.events][-1] == "forgotten" and [e.kind for e in resumed.events][
        -1
    ] == "forgotten"
    # Everything after the first event, in the same order, none twice: the replay joined the live stream.
    assert [(e.id, e.update) for e in resumed.events[:-1]] == [
        (e.id, e.update) for e in _after(whole.events, first.id)
    ]


def _after(events: list[LiveEvent], event_id: str | None) -> list[LiveEvent]:
    ids = [e.id for e in events]
    return [e for e in events[ids.index(event_id) + 1 :] if e.kind == "memory"] if event_id in ids else []


def _gone(memory: MemoryClient, memory_id: str) -> bool:
    try:
        memory.memory(memory_id)
    except NotFound:
        return True
    return False


def _stored(memory: MemoryClient, user: str, turn_ids: list[str]) -> bool:
    try:
        return all(memory.turn(user, t) for t in turn_ids)
    except NotFound:
        return False


def _json(value: Any) -> bytes:
    """JSON with non-ASCII escaped, as a client may send it: a lone surrogate as "\\ud800"."""
    return json.dumps(value, ensure_ascii=True).encode()


def test_invalid_unicode_is_a_422_and_its_text_reaches_no_log(gateway: Gateway) -> None:
    """A lone surrogate (valid JSON, not valid Unicode) was a 500 whose traceback logged the
    whole turn at ERROR: now a 422 wherever it is, on every route that reads text."""
    marker = "surrogate-marker-5d2a"
    bad = f"SECRET {marker} \ud800"
    turn = {**ACME_TURNS[0], "turn_id": "surrogate"}
    bodies = {
        "/v1/turns": [
            {**turn, "messages": [{"speaker": "Ann", "content": bad}]},
            {"turns": [{**turn, "metadata": {"note": bad}}]},
            {**turn, "metadata": {bad: 1}},
            {**turn, "timezone": bad},
        ],
        "/v1/recall": [{"user_id": USER, "query": bad}, {"user_id": bad, "query": marker}],
        "/v1/answer": [{"user_id": USER, "query": bad}],
        "/v1/tools/semantic_retrieve": [{"user_id": USER, "arguments": {"query": bad}}],
    }
    with gateway.client() as c:
        for path, cases in bodies.items():
            for body in cases:
                r = c.post(path, content=_json(body), headers={"content-type": "application/json"})
                assert r.status_code == 422, (path, r.status_code, r.text[:300])
                assert "string_unicode" in r.text and len(r.content) < 2_000, r.text[:300]
    _assert_not_logged(gateway, marker)


def test_a_422_echoes_no_more_than_a_short_input(gateway: Gateway) -> None:
    """FastAPI's 422 echoed each error's whole input: 1 MB in, 3.1 MB out."""
    marker = "echo-marker-8e41"
    with gateway.client() as c:
        r = c.post("/v1/recall", json={"user_id": USER, "query": marker + "x" * 1_000_000})
        assert r.status_code == 422 and len(r.content) < 1_000, len(r.content)
        assert r.json()["detail"][0]["type"] == "string_too_long"
        assert r.json()["detail"][0]["input"] == (marker + "x" * 100)[:100]
        r = c.post("/v1/turns", json={"turns": [{"turn_id": marker + str(i)} for i in range(500)]})
        assert r.status_code == 422 and len(r.content) < 10_000, len(r.content)
    _assert_not_logged(gateway, marker)


def test_delete_forgets_the_user_everywhere_and_records_a_tombstone(
    gateway: Gateway, ingested: dict[str, Any]
) -> None:
    globex_before = _everything_visible(gateway, KEY_GLOBEX)
    with gateway.client() as c:
        r = c.delete(f"/v1/users/{USER}")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tenant"] == "acme" and body["units"] == len(ACME_TURNS) and body["memories"] > 0
    assert _everything_visible(gateway, KEY_ACME) == set()
    with gateway.client() as c:
        texts = " ".join(
            i["text"]
            for q in ("moving", "kitchen", "Leeds")
            for i in c.post("/v1/recall", json={"user_id": USER, "query": q}).json()["items"]
        )
        assert texts == ""
        assert c.get(f"/v1/users/{USER}/timeline", params={"min_level": 1}).json()["nodes"] == []
    assert _everything_visible(gateway, KEY_GLOBEX) == globex_before  # the other tenant is untouched
    # And it stays so once the workers have handled the tombstone and the idle timer (3 s) has run.
    settings = gateway.pipeline.settings
    tombstones = [settings.kafka.topic(TOMBSTONES.name)]
    wait_for(lambda: asyncio.run(consumed(settings, tombstones)), 60, "the tombstone to be handled")
    time.sleep(3)
    assert _everything_visible(gateway, KEY_ACME) == set()
    stones = [
        Tombstone.from_bytes(v)
        for _, v in asyncio.run(read_topic(settings, settings.kafka.topic("tombstones")))
    ]
    mine = [(s.tenant, s.user_id, s.units) for s in stones if s.user_id == USER]
    assert mine == [("acme", USER, len(ACME_TURNS))]


def test_turns_on_their_way_when_a_user_is_deleted_are_forgotten_too(
    gateway: Gateway, ingested: dict[str, Any]
) -> None:
    """A DELETE right after a large batch was accepted, before the workers have stored it: those
    turns were accepted before the DELETE, so they are forgotten too, with whatever consolidation
    makes of them (memstream/core/forgetting.py); a turn sent once the DELETE was handled is new data."""
    user = "user-in-flight"
    turns = [{**t, "user_id": user, "turn_id": f"in-flight-{i}"} for i, t in enumerate(GLOBEX_TURNS * 4)][
        :500
    ]
    after = {**GLOBEX_TURNS[-1], "user_id": user, "turn_id": "after-the-delete"}
    settings = gateway.pipeline.settings
    with gateway.client() as c:
        assert c.post("/v1/turns", json={"turns": turns[:500]}).status_code == 202
        assert c.delete(f"/v1/users/{user}").status_code == 200
        # The workers handle the tombstone, after the ingest batch holding their lock (a turn stored
        # before that is erased too): a fixed pause was too short for a loaded machine.
        tombstones = [settings.kafka.topic(TOMBSTONES.name)]
        wait_for(lambda: asyncio.run(consumed(settings, tombstones)), 60, "the tombstone to be handled")
        assert c.post("/v1/turns", json=after).status_code == 202
    wait_for(lambda: asyncio.run(settled(settings)), 120, "the pipeline to settle after the delete")
    wait_for(lambda: "after-the-delete" in _everything_visible(gateway, KEY_ACME, user), 60, "the later turn")
    time.sleep(3)  # the idle timer (3 s) and anything else still on its way
    assert _everything_visible(gateway, KEY_ACME, user) == {"after-the-delete"}


# --- schemathesis: every operation of the OpenAPI document, generated inputs ------------------------

schema = schemathesis.openapi.from_dict(create_app(Settings()).openapi())


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_openapi_contract(case: Any, gateway: Gateway) -> None:
    """No 5xx, documented status codes, responses matching their schemas. Acceptance of every
    schema-valid body is not required: turns are also checked for rules a JSON Schema cannot
    state (an IANA time zone, ts within [min_ts, now + skew]) and get 422 with the reason."""
    # An event stream never ends: schemathesis reads it until the read timeout finds it silent, and
    # the gateway's keep-alive comes every 15 s (without this, 12 examples took 231 s of each CI pass).
    stream = {"timeout": 5} if case.path.endswith("/updates") else {}
    case.call_and_validate(
        base_url=gateway.url, headers=_auth(KEY_GLOBEX), excluded_checks=[positive_data_acceptance], **stream
    )


def test_the_docs_pages_need_nothing_but_the_gateway(gateway: Gateway) -> None:
    """Offline, a page that loads Swagger UI or ReDoc from a CDN is blank: every script, style
    and image of /docs and /redoc comes from the gateway itself."""
    for page in ("/docs", "/redoc"):
        html = httpx.get(gateway.url + page).text
        assets = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html) + re.findall(
            r"url: *'([^']+)'", html
        )
        assert assets and not [a for a in assets if "://" in a or a.startswith("//")], (page, assets)
        for asset in assets:
            served = httpx.get(gateway.url + asset)
            assert served.status_code == 200 and served.content, (page, asset)


def test_openapi_document_is_served(gateway: Gateway) -> None:
    spec = httpx.get(f"{gateway.url}/openapi.json").json()
    assert {"/v1/turns", "/v1/recall", "/v1/answer", "/v1/tools", "/v1/users/{user_id}"} <= set(spec["paths"])
    assert os.environ.get("MEMSTREAM_API_KEYS") is None  # the test's keys never leak into the runner
    assert Path(SAMPLE).exists()


def test_no_key_query_or_message_text_reaches_the_logs(gateway: Gateway, ingested: dict[str, Any]) -> None:
    """The HTTP path at INFO (the pipeline's log holds the gateway's output too): keys, queries and
    turn text are data, never logged, also when a request is refused or invalid."""
    secret_query = "what is my locker code zebra-harmonica-4471"
    secret_turn = {**ACME_TURNS[0], "turn_id": "log-check", "messages": [{"role": "user", "content": ""}]}
    with gateway.client(KEY_ACME) as acme, gateway.client("wrong-key-9f8e7d6c5b4a") as wrong:
        assert acme.post("/v1/recall", json={"user_id": USER, "query": secret_query}).status_code == 200
        assert acme.post("/v1/answer", json={"user_id": USER, "query": secret_query}).status_code == 200
        assert wrong.post("/v1/recall", json={"user_id": USER, "query": secret_query}).status_code == 401
        assert acme.post("/v1/turns", json=secret_turn).status_code == 422
    time.sleep(1)  # the processes flush their log lines
    logs = gateway.pipeline.log.read_text(errors="replace") + (
        gateway.pipeline.log.parent / "replica.log"
    ).read_text(errors="replace")
    assert "gateway" in logs  # the gateway did log (its start-up), so an absence below means something
    texts = [m["content"] for t in ACME_TURNS + GLOBEX_TURNS for m in t["messages"] if len(m["content"]) > 20]
    secrets = [KEY_ACME, KEY_GLOBEX, "wrong-key-9f8e7d6c5b4a", "zebra-harmonica", *texts]
    leaked = [s for s in secrets if s in logs]
    assert not leaked, leaked[:3]

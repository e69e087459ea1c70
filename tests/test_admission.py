"""Admission in the gateway: a request is authenticated and rate limited before it takes an
in-flight slot, a key holds at most MEMSTREAM_GATEWAY_MAX_IN_FLIGHT_PER_KEY slots, and a body must
arrive within MEMSTREAM_GATEWAY_BODY_TIMEOUT_S. Without keys, the rate limit counts by client
address (a client can name any number of keys) and forgets callers whose bucket has refilled.

In process (``Gate`` in front of a small app, httpx's ASGI transport) for the rules, and over real
HTTP against `memstream up` for the probe that found the lockout: 16+ connections sending a body
one byte at a time while another tenant recalls."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from memstream.adapters import metrics
from memstream.adapters.broker import Broker, free_port
from memstream.adapters.settings import Settings
from memstream.apps.gateway.app import create_app
from memstream.apps.gateway.auth import Bucket, evict_full, parse_keys, presented_key
from memstream.apps.gateway.deps import Tenant
from memstream.apps.gateway.gate import Admission, Gate, needs_tenant, reachable
from tests.conftest import make_pipeline, ready, wait_for

KEY_A = "tenant-a-key-0123456789abcdef"
KEY_B = "tenant-b-key-0123456789abcdef"
KEYS = {KEY_A: "tenanta", KEY_B: "tenantb"}
LOG_MARKER = "unhandled-marker-3b9d"


def _app(
    keys: dict[str, str] | None, limit: int, per_key: int, rate: float = 1e6, burst: int = 10**6
) -> FastAPI:
    """A gate in front of: /hold (waits until released, as a slow handler holds its slot), /echo
    (a body read, then the tenant), /whoami (the tenant), /open (no tenant needed)."""
    app = FastAPI()
    table = parse_keys(json.dumps(keys)) if keys else None
    app.add_middleware(Gate, admission=Admission(table, rate, burst, limit, per_key, body_timeout_s=0.5))
    app.state.entered, app.state.release = asyncio.Event(), asyncio.Event()

    @app.get("/hold")
    async def hold(tenant: Tenant) -> str:
        app.state.entered.set()
        await app.state.release.wait()
        return tenant

    @app.post("/echo")
    async def echo(body: dict[str, str], tenant: Tenant) -> str:
        return tenant

    @app.get("/whoami")
    async def whoami(tenant: Tenant) -> str:
        return tenant

    @app.get("/boom")
    async def boom(tenant: Tenant) -> None:
        raise RuntimeError(f"an error carrying the request's text: {LOG_MARKER}")

    @app.get("/open")
    async def open_route() -> str:
        return "open"

    return app


def _client(app: FastAPI) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_authentication_and_the_per_key_bound_come_before_the_slot() -> None:
    """Two slots, one per key: key A's second request gets 429 at once, key B still gets the
    other slot; with every slot held, an unknown key or none gets 401 (not 503: it never
    competes for a slot), and a route needing no tenant is shed with 503."""
    app = _app(KEYS, limit=2, per_key=1)

    async def scenario() -> None:
        async with _client(app) as client, asyncio.timeout(10):
            held = asyncio.create_task(client.get("/hold", headers=_bearer(KEY_A)))
            await app.state.entered.wait()
            before = metrics.GATEWAY_SHED.labels("/whoami", "key")._value.get()
            busy = await client.get("/whoami", headers=_bearer(KEY_A))
            assert busy.status_code == 429 and busy.headers["Retry-After"] == "1", busy.text
            assert "in flight for this API key" in busy.json()["detail"]
            assert metrics.GATEWAY_SHED.labels("/whoami", "key")._value.get() == before + 1
            app.state.entered.clear()
            held_b = asyncio.create_task(client.get("/hold", headers=_bearer(KEY_B)))
            await app.state.entered.wait()  # key B was admitted beside key A
            for headers in ({}, _bearer("not-a-key-0123456789"), {"X-API-Key": "nope-0123456789abcdef"}):
                r = await client.get("/whoami", headers=headers)
                assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer", r.text
            assert (await client.get("/open")).status_code == 503  # every slot is held
            app.state.release.set()
            assert [(await t).json() for t in (held, held_b)] == ["tenanta", "tenantb"]
            assert (await client.get("/whoami", headers={"X-API-Key": KEY_B})).json() == "tenantb"
            assert (await client.get("/open")).status_code == 200

    asyncio.run(scenario())


def test_a_body_slower_than_the_deadline_gets_408_and_frees_its_slot() -> None:
    app = _app(KEYS, limit=1, per_key=1)

    async def trickle() -> AsyncIterator[bytes]:
        yield b'{"a": '
        await asyncio.sleep(30)  # never finishes within the test's bound
        yield b'"b"}'

    async def scenario() -> None:
        async with _client(app) as client, asyncio.timeout(10):
            t0 = time.perf_counter()
            r = await client.post("/echo", content=trickle(), headers=_bearer(KEY_A))
            took = time.perf_counter() - t0
            assert r.status_code == 408, r.text
            assert r.headers["Connection"] == "close"
            assert 0.4 < took < 3, took
            ok = await client.post("/echo", json={"a": "b"}, headers=_bearer(KEY_A))
            assert ok.status_code == 200 and ok.json() == "tenanta"  # the slot came back

    asyncio.run(scenario())


def test_without_keys_the_rate_limit_counts_by_address_not_by_the_key_sent() -> None:
    """300 requests naming 300 different keys from one address share one bucket of 5."""
    app = _app(None, limit=10, per_key=10, rate=0.01, burst=5)

    async def scenario() -> None:
        async with _client(app) as client, asyncio.timeout(30):
            codes: Counter[int] = Counter()
            for i in range(300):
                codes[(await client.get("/whoami", headers={"X-API-Key": f"key-{i}"})).status_code] += 1
            assert codes == {200: 5, 429: 295}, codes

    asyncio.run(scenario())


def test_an_unhandled_error_is_a_500_logged_as_its_type_and_route_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The traceback of an error raised while handling a request can hold the request's text (a
    validation error's input, an exception's message): the gate answers 500 and logs one line,
    the error's type and the route, at every level captured."""
    caplog.set_level(logging.DEBUG)
    app = _app(KEYS, limit=1, per_key=1)

    async def scenario() -> None:
        async with _client(app) as client, asyncio.timeout(10):
            r = await client.get("/boom", headers=_bearer(KEY_A))
            assert r.status_code == 500 and r.json() == {"detail": "internal error"}
            assert LOG_MARKER not in r.text
            assert (await client.get("/whoami", headers=_bearer(KEY_A))).status_code == 200  # slot back

    asyncio.run(scenario())
    lines = [(r.name, r.levelname, r.getMessage(), r.exc_info, r.exc_text) for r in caplog.records]
    assert ("memstream.gateway", "ERROR", "unhandled RuntimeError on GET /boom", None, None) in lines, lines
    assert not [line for line in lines if LOG_MARKER in str(line)], lines


def test_the_gate_rate_limits_and_names_the_routes_of_included_routers() -> None:
    """FastAPI keeps an included router as one route holding it: the gate looks inside, so a route
    of a router is rate limited and counted under its own path (only the gate rate limits)."""
    app = FastAPI()
    router = APIRouter()

    @router.get("/inner")
    async def inner(tenant: Tenant) -> str:
        return tenant

    app.include_router(router)
    app.add_middleware(Gate, admission=Admission(parse_keys(json.dumps(KEYS)), 1e-3, 1, 10, 10, 0.5))

    async def scenario() -> None:
        async with _client(app) as client, asyncio.timeout(10):
            before = metrics.GATEWAY_REQUESTS.labels("/inner", "429")._value.get()
            assert (await client.get("/inner", headers=_bearer(KEY_A))).json() == "tenanta"
            limited = await client.get("/inner", headers=_bearer(KEY_A))
            assert limited.status_code == 429, limited.text
            assert limited.json()["detail"] == "rate limit exceeded"
            assert metrics.GATEWAY_REQUESTS.labels("/inner", "429")._value.get() == before + 1

    asyncio.run(scenario())


def test_the_gate_finds_every_route_of_the_gateway_and_which_need_a_tenant() -> None:
    """Every path of the OpenAPI document is a route the gate reaches; all of /v1 but the tool
    schemas need a tenant (so a key and its rate limit), the probes, scrapes and the dashboard none."""
    app = create_app(Settings())
    routes = [r for r in reachable(app.router.routes) if isinstance(r, APIRoute) and r.include_in_schema]
    assert {r.path for r in routes} == set(app.openapi()["paths"])
    open_routes = {(m, r.path) for r in routes if not needs_tenant(r) for m in r.methods}
    assert open_routes == {
        ("GET", "/v1/tools"),
        *(("GET", path) for path in ("/healthz", "/readyz", "/metrics", "/dashboard", "/dashboard/data")),
    }
    # turns, a turn, recall, answer, timeline, updates, a tool, memories, a memory and its delete, export,
    # delete of a user
    assert len(routes) - len(open_routes) == 12


def test_refilled_buckets_are_evicted_and_draining_ones_kept() -> None:
    rate, burst = 10.0, 5
    buckets = {i: Bucket(tokens=0.0, at=999.0 + i / 1000) for i in range(1000)}
    # At t=1000 an empty bucket last used at t has 10 * (1000 - t) tokens: full (5) unless t > 999.5.
    kept = evict_full(buckets, 1000.0, rate, burst)
    assert set(kept) == set(range(501, 1000))
    assert evict_full({"a": Bucket(4.0, 0.0)}, 0.05, rate, burst) == {"a": Bucket(4.0, 0.0)}
    assert evict_full({"a": Bucket(4.0, 0.0)}, 0.1, rate, burst) == {}


def test_the_presented_key_is_the_bearer_token_else_x_api_key() -> None:
    assert presented_key([(b"authorization", b"Bearer  abc "), (b"x-api-key", b"zzz")]) == "abc"
    assert presented_key([(b"authorization", b"bearer abc")]) == "abc"
    assert presented_key([(b"authorization", b"Basic abc"), (b"x-api-key", b"zzz")]) == "zzz"
    assert presented_key([]) is None


# --- the probe, over real HTTP ---------------------------------------------------------------

SLOW = 20  # slow-body connections of key A: more than every slot of the gateway (16)
BODY_TIMEOUT_S = 2.0
MARKER = "slow-body-marker-7c1e"


def _slow_body(port: int, key: str | None) -> socket.socket:
    """A connection that sent a recall's headers (Content-Length 100000) and one byte of body."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    head = (
        f"POST /v1/recall HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    )
    sock.sendall(head.encode())
    return sock


def _slow_headers(port: int) -> socket.socket:
    """A connection that sent part of a request's headers."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"POST /v1/recall HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY_A}\r\n".encode())
    return sock


def _closed_at(sock: socket.socket) -> float:
    """When the server closed the connection (perf_counter), having sent nothing."""
    assert sock.recv(4096) == b""
    return time.perf_counter()


def _status(sock: socket.socket) -> tuple[int, float]:
    """The status code of the connection's response and when it came (perf_counter)."""
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1]), time.perf_counter()


@pytest.mark.integration
def test_slow_bodies_of_one_key_leave_other_tenants_served(broker: Broker, tmp_path: Path) -> None:
    """20 connections of key A hold a recall's body (headers with Content-Length: 100000, then one
    byte), and 5 more without a key: tenant B's recalls and timelines keep getting 200; A's first
    8 (its per-key bound) get 408 at the body deadline, the other 12 get 429 at once, the keyless
    ones 401 at once; 3 connections still sending their headers are closed at the same deadline.
    Bounded: 28 sockets, each read within 10 s."""
    port = free_port()
    pipeline = make_pipeline(
        broker,
        tmp_path,
        MEMSTREAM_GATEWAY_PORT=str(port),
        MEMSTREAM_API_KEYS=json.dumps(KEYS),
        MEMSTREAM_GATEWAY_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
    ).start()
    url = f"http://127.0.0.1:{port}"
    socks: list[socket.socket] = []
    heads: list[socket.socket] = []
    try:
        wait_for(lambda: ready(url), 120, "the gateway to be ready", poll=1)
        t0 = time.perf_counter()
        socks = [_slow_body(port, KEY_A) for _ in range(SLOW)] + [_slow_body(port, None) for _ in range(5)]
        heads = [_slow_headers(port) for _ in range(3)]
        time.sleep(0.3)  # every connection's headers are in
        recall = {"user_id": "user-0002", "query": f"where {MARKER}", "now": "2025-03-01T00:00:00Z"}
        seconds, codes = [], []
        with httpx.Client(base_url=url, headers=_bearer(KEY_B), timeout=10) as b:
            for _ in range(10):
                s0 = time.perf_counter()
                codes.append(b.post("/v1/recall", json=recall).status_code)
                codes.append(b.get("/v1/users/user-0002/timeline").status_code)
                seconds.append(time.perf_counter() - s0)
        held_s = time.perf_counter() - t0
        heads[0].sendall(b"X-Trickle: 1\r\n")  # a byte more restarts no deadline
        assert held_s < BODY_TIMEOUT_S, f"tenant B's requests took {held_s:.2f}s: the slow bodies were let go"
        assert codes == [200] * 20, codes
        answers = [_status(s) for s in socks]
        slow = Counter(code for code, _ in answers[:SLOW])
        assert slow == {408: 8, 429: 12}, slow
        assert all(code == 401 for code, _ in answers[SLOW:]), answers[SLOW:]
        for code, at in answers[:SLOW]:
            if code == 408:
                assert BODY_TIMEOUT_S - 0.5 < at - t0 < BODY_TIMEOUT_S + 3, at - t0
        print(
            f"tenant B while {SLOW} slow bodies were held: 20 x 200, request pair "
            f"p50 {sorted(seconds)[5] * 1000:.1f} ms, max {max(seconds) * 1000:.1f} ms; "
            f"408 after {max(at - t0 for c, at in answers if c == 408):.2f} s",
        )
        # Headers have the same deadline: the connections still sending theirs are closed.
        for at in [_closed_at(h) for h in heads]:
            assert BODY_TIMEOUT_S - 0.5 < at - t0 < BODY_TIMEOUT_S + 3, at - t0
        scraped = httpx.get(f"{url}/metrics", timeout=5).text
        assert 'memstream_gateway_shed_total{reason="key",route="/v1/recall"} 12.0' in scraped
        assert 'memstream_gateway_requests_total{route="/v1/recall",status="408"} 8.0' in scraped
        assert "memstream_gateway_in_flight 0.0" in scraped
        assert MARKER not in pipeline.log.read_text(errors="replace")
    finally:
        for s in socks + heads:
            s.close()
        pipeline.stop()

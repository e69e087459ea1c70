"""A worker's data routes are internal: on their own port, behind the gateways' token, confined to one
user (``memstream.embedded_store.internal``, ``memstream.embedded_store.remote_store.confinement``);
its status port serves only ``memstream.streams.pages.PUBLIC_PAGES``. The last test replays issue 26's probe
against a running ``memstream up`` and walks every route of every port, taken from the apps' own route
tables."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import faust
import httpx
import numpy as np
import orjson
import pytest
from aiohttp.test_utils import TestClient as AiohttpClient
from aiohttp.test_utils import TestServer
from fastapi.routing import APIRoute
from pydantic import ValidationError

from memstream.adapters.broker import Broker, free_port
from memstream.adapters.settings import Settings, StorageSettings, WorkerSettings
from memstream.adapters.store.edge import EdgeStore
from memstream.apps.gateway.app import create_app
from memstream.core.store import CollectionSpec, Filter, Point, StoreUnavailable, VectorStore
from memstream.embedded_store.internal import Answer, authorized, bind, internal_app, store_answer
from memstream.embedded_store.remote_store import RemoteStore, confinement, serve
from memstream.streams.faust_adapter import faust_settings
from memstream.streams.pages import PUBLIC_PAGES, Readiness, add_pages
from tests.conftest import make_pipeline, ready, wait_for

TOKEN = "internal-token-0123456789"
SPEC = CollectionSpec("units", 4, keyword_fields=("user_key", "tenant"))
PINNED = {"equals": {"user_key": "tenantB/victim"}, "ranges": {}, "exclude_ids": []}


# --- the token ---------------------------------------------------------------------------------------


def test_the_internal_port_takes_connections_from_the_moment_status_can_name_it() -> None:
    """/status names the port as soon as the worker has bound it; a gateway that connects before the
    internal app has started waits in the backlog (stop 34's CI saw "connection refused" here)."""
    sock = bind("127.0.0.1", 0)
    try:
        with socket.create_connection(sock.getsockname(), timeout=2):
            pass
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("header", "token", "ok"),
    [
        (f"Bearer {TOKEN}", TOKEN.encode(), True),
        (f"bearer {TOKEN}", TOKEN.encode(), True),
        (None, TOKEN.encode(), False),
        ("", TOKEN.encode(), False),
        (f"Bearer {TOKEN}x", TOKEN.encode(), False),
        (f"Basic {TOKEN}", TOKEN.encode(), False),
        (TOKEN, TOKEN.encode(), False),
        ("Bearer ", b"", False),  # no token configured: nobody, not an empty header
        (f"Bearer {TOKEN}", None, False),
    ],
)
def test_only_the_configured_token_is_authorized(header: str | None, token: bytes | None, ok: bool) -> None:
    assert authorized(header, token or None) is ok


def test_a_worker_off_loopback_needs_a_token() -> None:
    with pytest.raises(ValidationError, match="MEMSTREAM_INTERNAL_TOKEN"):
        Settings(worker=WorkerSettings(internal_host="0.0.0.0"))
    with pytest.raises(ValidationError, match="MEMSTREAM_INTERNAL_TOKEN is shorter"):
        Settings(worker=WorkerSettings(internal_token="short"))
    assert (
        Settings(worker=WorkerSettings(internal_host="0.0.0.0", internal_token=TOKEN)).worker.internal_host
        == "0.0.0.0"
    )
    assert Settings(worker=WorkerSettings(internal_host="::1")).worker.internal_token is None  # loopback
    assert (
        Settings(
            worker=WorkerSettings(internal_host="0.0.0.0"),
            storage=StorageSettings(store="qdrant", qdrant_url="http://q:6333"),
        ).storage.store
        == "qdrant"
    )


# --- confinement: nothing selects a whole partition ----------------------------------------------------


@pytest.mark.parametrize(
    ("op", "req"),
    [
        ("scroll", {"collection": "units", "flt": None, "limit": 100}),
        ("scroll", {"collection": "units", "flt": {"equals": {"tenant": "tenantB"}}, "limit": 100}),
        ("delete", {"collection": "units", "flt": None}),
        ("delete", {"collection": "units", "flt": {"equals": {"user_key": ""}}}),
        ("delete", {"collection": "units", "flt": {"equals": {"user_key": 7}}}),
        ("delete", {"collection": "units"}),
        ("count", {"collection": "units", "flt": {"ranges": {"start": {"gte": 0}}}}),
        (
            "search_many",
            {"collection": "units", "queries": [{"vector": [0, 0, 0, 1], "flt": PINNED}, {"flt": None}]},
        ),
        ("upsert", {"collection": "units", "points": []}),
        ("ensure_collection", {"spec": {}}),
        ("set_payload", {"collection": "units", "ids": [], "values": {}}),
        ("scroll", ["not", "an", "object"]),
    ],
)
def test_a_request_that_does_not_pin_one_user_is_refused(op: str, req: Any) -> None:
    assert confinement(op, req)


@pytest.mark.parametrize(
    ("op", "req"),
    [
        ("scroll", {"collection": "units", "flt": PINNED, "limit": 100}),
        ("delete", {"collection": "units", "flt": PINNED}),
        (
            "count",
            {"collection": "units", "flt": {"equals": {"user_key": "readyz/probe"}}},
        ),  # the gateway's /readyz
        ("search_many", {"collection": "units", "queries": [{"flt": PINNED}, {"flt": PINNED}]}),
        ("retrieve", {"collection": "units", "ids": ["a"]}),
    ],
)
def test_what_a_gateway_sends_is_served(op: str, req: Any) -> None:
    assert confinement(op, req) is None


@pytest.fixture
def store(tmp_path: Path) -> Iterator[VectorStore]:
    s = EdgeStore(tmp_path / "store")
    s.ensure_collection(SPEC)
    vec = np.array([0, 0, 0, 1], dtype=np.float32)
    s.upsert(
        "units",
        [
            Point(
                f"00000000-0000-0000-0000-00000000000{i}",
                vec,
                {"user_key": user, "tenant": user.split("/")[0]},
            )
            for i, user in enumerate(["tenantA/ana", "tenantB/victim", "tenantB/other"])
        ],
    )
    yield s
    s.close()


def test_a_confined_delete_without_a_user_leaves_the_partition_whole(store: VectorStore) -> None:
    with pytest.raises(ValueError, match="must pin one user"):
        serve(store, "delete", orjson.dumps({"collection": "units", "flt": None}), confined=True)
    assert store.count("units") == 3
    serve(store, "delete", orjson.dumps({"collection": "units", "flt": PINNED}), confined=True)
    assert store.count("units") == 2
    serve(
        store, "delete", orjson.dumps({"collection": "units", "flt": None})
    )  # unconfined: the protocol itself
    assert store.count("units") == 0


def test_a_tenants_users_leave_a_worker_as_their_keys_alone(store: VectorStore) -> None:
    # `memstream users` lists a tenant's users through the workers: keys, never a point's payload.
    assert confinement("user_keys", {"collection": "units"})
    assert confinement("user_keys", {"collection": "units", "tenant": ""})
    req = orjson.dumps({"collection": "units", "tenant": "tenantB"})
    assert orjson.loads(serve(store, "user_keys", req, confined=True)) == ["tenantB/other", "tenantB/victim"]


# --- the internal port's pages over HTTP, every route of its table -------------------------------------


def _filled(path: str) -> str:
    return re.sub(r"\{partition\}", "0", re.sub(r"\{op\}", "scroll", path))


def test_every_internal_route_needs_the_token(store: VectorStore) -> None:
    async def recall(partition: str, body: bytes) -> Answer:
        return 200, b"{}"

    app = internal_app(TOKEN.encode(), store_answer(lambda: {0}, lambda p: store), recall)
    routes = sorted({(r.method, _filled(r.resource.canonical)) for r in app.router.routes() if r.resource})
    assert routes == [("POST", "/recall/0"), ("POST", "/store/0/scroll")]
    scroll = orjson.dumps({"collection": "units", "flt": PINNED, "limit": 10})

    async def walk() -> dict[str, list[int]]:
        seen: dict[str, list[int]] = {}
        async with AiohttpClient(TestServer(app, host="127.0.0.1")) as c:
            for method, path in [*routes, ("GET", "/nowhere")]:
                codes = []
                for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, _auth()):
                    r = await c.request(method, path, data=scroll, headers=headers)
                    codes.append(r.status)
                seen[path] = codes
            unpinned = await c.post(
                "/store/0/scroll", data=b'{"collection":"units","flt":null,"limit":9}', headers=_auth()
            )
            seen["unpinned"] = [unpinned.status]
        return seen

    seen = asyncio.run(walk())
    assert seen == {
        "/recall/0": [401, 401, 200],
        "/store/0/scroll": [401, 401, 200],
        "/nowhere": [401, 401, 404],
        "unpinned": [400],
    }


def test_a_gateway_with_another_token_is_told_at_once(store: VectorStore) -> None:
    """A 401 is not a moved partition: the call fails at once, naming the setting, instead of looking
    for another owner until the timeout."""

    async def recall(partition: str, body: bytes) -> Answer:
        return 200, b"{}"

    app = internal_app(TOKEN.encode(), store_answer(lambda: {0}, lambda p: store), recall)

    async def call() -> float:
        async with TestServer(app, host="127.0.0.1") as server:
            url = str(server.make_url("")).rstrip("/")
            with httpx.Client(timeout=5) as client:
                remote = RemoteStore(0, lambda p, refresh: url, client, 5.0, "wrong-token-0123456789")
                started = time.monotonic()
                with pytest.raises(StoreUnavailable, match="refused MEMSTREAM_INTERNAL_TOKEN"):
                    await asyncio.to_thread(
                        remote.count, "units", Filter(equals={"user_key": "tenantB/victim"})
                    )
                elapsed = time.monotonic() - started
                right = RemoteStore(0, lambda p, refresh: url, client, 5.0, TOKEN)
                assert (
                    await asyncio.to_thread(
                        right.count, "units", Filter(equals={"user_key": "tenantB/victim"})
                    )
                    == 1
                )
                return elapsed

    assert asyncio.run(call()) < 1.0


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


# --- a running `memstream up`: the issue's probe, and every route of every port ------------------------


def _status_port_routes(settings: Settings) -> set[tuple[str, str]]:
    """The routes a worker's status port serves, from faust's own route table (its pages and its built-in
    blueprints), built as streams/app.py builds it."""
    app = faust.App("route-walk", **faust_settings(settings))
    add_pages(app, Readiness(), None, set, lambda: None, None)  # type: ignore[arg-type]
    app.web.init_server()
    return {
        (r.method, r.resource.canonical)
        for r in app.web.web_app.router.routes()  # type: ignore[attr-defined]  # the aiohttp driver's
        if r.resource is not None and r.method != "HEAD"
    }


def _gateway_routes(settings: Settings) -> list[tuple[str, str]]:
    app = create_app(settings)
    return sorted(
        (method, re.sub(r"\{[^}]+\}", "walker", r.path))
        for r in app.routes
        if isinstance(r, APIRoute)
        for method in r.methods or ()
    )


def test_the_issue_probe_is_refused_and_no_port_serves_data_without_its_credential(
    broker: Broker, tmp_path: Path
) -> None:
    gateway_port = free_port()
    pipeline = make_pipeline(
        broker,
        tmp_path,
        MEMSTREAM_WORKERS="2",
        MEMSTREAM_GATEWAY_PORT=str(gateway_port),
        MEMSTREAM_API_KEYS='{"tenantA-key-0123456789": "tenantA", "tenantB-key-0123456789": "tenantB"}',
    )
    del pipeline.env["MEMSTREAM_INTERNAL_TOKEN"]  # the embedded default: `up` makes one
    pipeline.start()
    gateway = f"http://127.0.0.1:{gateway_port}"
    settings = pipeline.settings
    try:
        pipeline.wait(lambda: ready(gateway), 180, "the gateway to be ready")
        turn = {
            "user_id": "victim",
            "session_id": "s1",
            "turn_id": "t1",
            "ts": "2025-03-01T10:00:00Z",
            "messages": [{"speaker": "Ana", "content": "I moved to Lisbon in March"}],
        }
        with httpx.Client(base_url=gateway, headers={"Authorization": "Bearer tenantB-key-0123456789"}) as b:
            assert b.post("/v1/turns", json=turn).status_code == 202
        statuses = [
            httpx.get(f"http://127.0.0.1:{settings.worker.metrics_port + i}/status").json() for i in range(2)
        ]
        internal = [s["internal_port"] for s in statuses]
        scroll = {"collection": "units", "flt": {"equals": {"tenant": "tenantB"}}, "limit": 100}
        delete = {"collection": "units", "flt": {"equals": {"user_key": "tenantB/victim"}}}

        # The issue's two requests, on the status port: no such pages there any more.
        for i in range(2):
            metrics = f"http://127.0.0.1:{settings.worker.metrics_port + i}"
            assert httpx.post(f"{metrics}/store/0/scroll", json=scroll).status_code == 404
            assert httpx.post(f"{metrics}/store/0/delete", json=delete).status_code == 404
        # On the internal port: 401 without the token, 401 with another, on every worker.
        for port in internal:
            for headers in ({}, {"Authorization": "Bearer not-the-token-0123456789"}):
                for op, body in (("scroll", scroll), ("delete", delete)):
                    r = httpx.post(f"http://127.0.0.1:{port}/store/0/{op}", json=body, headers=headers)
                    assert r.status_code == 401, (port, op, r.text)
        # Every route of the status port (faust's table, built as the worker builds it) is a public page,
        # and answers here without a credential; the data routes are not among them.
        served = _status_port_routes(settings)
        assert {path for _, path in served} == set(PUBLIC_PAGES), served
        for method, path in served:
            assert httpx.request(
                method, f"http://127.0.0.1:{settings.worker.metrics_port}{path}"
            ).status_code in (
                200,
                503,
            )

        # Every route of the internal port, from its own table, on every worker: 401 without the token.
        async def no_recall(partition: str, body: bytes) -> Answer:
            return 500, b""

        table = internal_app(b"x", store_answer(set, lambda p: None), no_recall).router.routes()  # type: ignore[arg-type, return-value]
        for port in internal:
            for route in table:
                url = f"http://127.0.0.1:{port}{_filled(route.resource.canonical)}"  # type: ignore[union-attr]
                assert httpx.request(route.method, url, json=delete).status_code == 401, url
        # Every route of the gateway without an API key: 401, but for its probes, its metrics, the
        # tools' JSON schemas, the docs pages and the dashboard (the same for everyone: no data).
        public = {"/healthz", "/readyz", "/metrics", "/v1/tools", "/docs", "/docs/oauth2-redirect", "/redoc"}
        public |= {"/dashboard", "/dashboard/data"}
        for method, path in _gateway_routes(settings):
            code = httpx.request(method, f"{gateway}{path}", json={}).status_code
            assert (code == 401) != (path in public), (method, path, code)
        # The user is still there, nothing above deleted them; and the gateway reads the worker's store
        # with the token `up` made and gave both.
        with httpx.Client(base_url=gateway, headers={"Authorization": "Bearer tenantB-key-0123456789"}) as b:
            ask = {"user_id": "victim", "query": "Where did I move?", "levels": [1]}
            wait_for(
                lambda: b.post("/v1/recall", json=ask).json().get("items"), 60, "the turn to be recalled"
            )
    finally:
        pipeline.stop()

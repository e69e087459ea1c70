"""Load shedding in the gateway: past MEMSTREAM_GATEWAY_MAX_IN_FLIGHT requests in progress, a
request gets 503 with Retry-After at once (probes and scrapes never), and nothing times out.
The refusal is a pure ASGI middleware (``Gate``), cheap enough to answer at once when the event
loop is busy. bench/load.py measures the same under rising open-loop load."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from memstream.adapters import metrics
from memstream.adapters.broker import Broker, free_port
from memstream.apps.gateway.gate import Admission, Gate, admit
from tests.conftest import make_pipeline, ready, wait_for

KEY = "shed-key-0123456789abcdef"


def test_admit_bounds_requests_in_flight_but_never_probes() -> None:
    assert admit("/v1/recall", 0, 1)
    assert not admit("/v1/recall", 1, 1)
    assert not admit("/v1/turns", 64, 64)
    assert admit("/v1/turns", 63, 64)
    for path in ("/healthz", "/readyz", "/metrics"):
        assert admit(path, 1_000, 1)


def test_the_gate_refuses_past_the_bound_at_once_and_frees_slots_on_response_or_error() -> None:
    """In process, no network: one request holds the only slot; the next gets 503 with
    Retry-After while it is still held, within a bounded time; a probe passes; the slot comes back
    when a response starts and when the handler raises."""
    app = FastAPI()
    app.add_middleware(Gate, admission=Admission(None, 1e6, 10**6, limit=1, per_key=1, body_timeout_s=10))
    entered, release = asyncio.Event(), asyncio.Event()

    @app.get("/slow")
    async def slow() -> dict[str, bool]:
        entered.set()
        await release.wait()
        return {"ok": True}

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("boom")

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    def shed() -> float:
        return metrics.GATEWAY_SHED.labels("/slow", "gateway")._value.get()

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            async with asyncio.timeout(10):  # bounded: nothing here may wait on the held slot
                held = asyncio.create_task(client.get("/slow"))
                await entered.wait()
                before, t0 = shed(), time.perf_counter()
                refused = await client.get("/slow")
                assert time.perf_counter() - t0 < 2
                assert refused.status_code == 503
                assert refused.headers["Retry-After"] == "1"
                assert "overloaded" in refused.json()["detail"]
                assert shed() == before + 1
                assert (await client.get("/healthz")).status_code == 200  # probes never shed
                assert not held.done()
                release.set()
                assert (await held).status_code == 200
                assert (await client.get("/slow")).status_code == 200  # the slot came back
                assert (await client.get("/boom")).status_code == 500
                assert (await client.get("/slow")).status_code == 200  # and after an exception

    asyncio.run(scenario())


@pytest.mark.integration
def test_past_the_bound_requests_get_503_with_retry_after_and_none_time_out(
    broker: Broker, tmp_path: Path
) -> None:
    port = free_port()
    pipeline = make_pipeline(
        broker,
        tmp_path,
        MEMSTREAM_GATEWAY_PORT=str(port),
        MEMSTREAM_GATEWAY_MAX_IN_FLIGHT="1",
        MEMSTREAM_API_KEYS=json.dumps({KEY: "acme"}),
        MEMSTREAM_RATE_LIMIT_PER_S="10000",
        MEMSTREAM_RATE_LIMIT_BURST="10000",
    ).start()
    url = f"http://127.0.0.1:{port}"

    async def burst(n: int) -> list[httpx.Response | BaseException]:
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
        ) as client:
            # Recalls go to the worker's store over HTTP: slow enough to overlap each other.
            body = {"user_id": "user-0002", "query": "Where am I moving to?", "now": "2025-03-01T00:00:00Z"}
            recalls = [client.post("/v1/recall", json=body) for _ in range(n)]
            probes = [client.get(path) for path in ("/healthz", "/readyz", "/metrics")]
            return await asyncio.gather(*recalls, *probes, return_exceptions=True)

    try:
        wait_for(lambda: ready(url), 120, "the gateway to be ready", poll=1)
        results = asyncio.run(burst(40))
        errors = [r for r in results if isinstance(r, BaseException)]
        assert not errors, errors  # no timeout, no refused connection
        responses = [r for r in results if isinstance(r, httpx.Response)]
        recalls, probes = responses[:-3], responses[-3:]
        codes = Counter(r.status_code for r in recalls)
        assert set(codes) <= {200, 503}, codes
        assert codes[200] >= 1 and codes[503] >= 1, codes
        for r in recalls:
            if r.status_code == 503:
                assert r.headers["Retry-After"] == "1"
                assert "overloaded" in r.json()["detail"]
        assert [p.status_code for p in probes] == [200, 200, 200]  # never shed

        metrics = httpx.get(f"{url}/metrics", timeout=5).text
        shed = next(line for line in metrics.splitlines() if line.startswith("memstream_gateway_shed_total{"))
        assert 'route="/v1/recall"' in shed and float(shed.split()[-1]) == codes[503]
        counted = f'memstream_gateway_requests_total{{route="/v1/recall",status="503"}} {codes[503]}.0'
        assert counted in metrics
        # Once the burst is over, the gateway answers normally again.
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as c:
            r = c.post("/v1/recall", json={"user_id": "user-0002", "query": "moving"})
        assert r.status_code == 200, r.text
    finally:
        pipeline.stop()

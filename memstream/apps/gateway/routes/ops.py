"""Operations: liveness, readiness and the Prometheus metrics, never shed by the gate."""

from __future__ import annotations

import asyncio

from aiokafka.errors import KafkaError
from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from memstream.apps.gateway.deps import Svc
from memstream.core.store import Filter, StoreUnavailable
from memstream.core.units import UNITS, USER_FIELD
from memstream.schemas.api import Problem

router = APIRouter(tags=["ops"])


@router.get("/healthz")
def healthz() -> dict[str, bool]:
    """The process is up."""
    return {"ok": True}


@router.get("/readyz", responses={503: {"model": Problem}})
async def readyz(svc: Svc) -> JSONResponse:
    """Ready when the broker answers, live updates are flowing, and every partition's store
    answers. Draining (``memstream up`` stopping): 503, with the turn requests in progress."""
    if svc.drain.draining:
        return JSONResponse(svc.drain.report(), status_code=503)
    problems = []
    try:
        await asyncio.wait_for(svc.producer.client.fetch_all_metadata(), 2.0)
    except (KafkaError, TimeoutError) as exc:
        problems.append(f"broker: {type(exc).__name__}")
    if not svc.hub.ready.is_set():
        problems.append("memory.updates consumer not started")
    probe = Filter(equals={USER_FIELD: "readyz/probe"})
    for p in range(svc.settings.kafka.topic_partitions):
        try:
            await asyncio.wait_for(run_in_threadpool(svc.shards.get(p).count, UNITS, probe), 3.0)
        except (StoreUnavailable, TimeoutError) as exc:
            problems.append(f"store of partition {p}: {type(exc).__name__}")
    if problems:
        return JSONResponse({"ready": False, "problems": problems}, status_code=503)
    return JSONResponse({"ready": True})


@router.get("/metrics", response_class=Response)
def get_metrics() -> Response:
    """Prometheus metrics of this replica."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

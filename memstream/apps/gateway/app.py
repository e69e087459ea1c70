"""The query gateway (FastAPI). It keeps no state of its own: turns go to the ``turns`` topic,
reads go to the stores (the Qdrant server, or with the embedded store the worker that owns the
user's partition: a recall goes to it whole, in one request), live updates come from
``memory.updates``. Run any number of replicas.

Every request is scoped to the tenant of its API key; a user is ``tenant/user_id``.

This module only puts the parts together: admission (``gate``), the services the routes share
(``deps``), the error answers (``errors``), and the routes, one router per concern (``routes``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from memstream.adapters.settings import Settings
from memstream.apps.gateway import errors
from memstream.apps.gateway.dashboard import dashboard_router
from memstream.apps.gateway.deps import services
from memstream.apps.gateway.drain import DRAIN_SIGNAL
from memstream.apps.gateway.gate import Admission, Gate
from memstream.apps.gateway.routes import ingest, memories, ops, recall, tools, users


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with services(settings) as svc:
            app.state.svc = svc
            # Only a gateway in the main thread can take the signal (not one served from a thread).
            with suppress(RuntimeError):
                asyncio.get_running_loop().add_signal_handler(DRAIN_SIGNAL, svc.drain.start)
            yield

    app = FastAPIOffline(
        title="memstream gateway",
        version="1",
        description="Long-term memory for agents: ingest turns, recall time-aware hierarchical memory, "
        "answer with dates, agent tools, live updates. Authenticate with `Authorization: Bearer <key>`.",
        lifespan=lifespan,
        max_body_size=settings.gateway.max_request_bytes,  # 413, chunked bodies included
        responses=errors.RESPONSES,
        exception_handlers=errors.HANDLERS,
    )
    app.add_middleware(Gate, admission=Admission.of(settings.gateway))
    app.include_router(ingest.router)  # POST /v1/turns, GET a stored turn
    app.include_router(recall.router)  # recall, answer, the memory tree, live updates (SSE)
    app.include_router(tools.router)  # the agent tools
    app.include_router(memories.router)  # a user's memories: a page, one, its deletion
    app.include_router(users.router)  # a user's export, and forgetting them
    app.include_router(ops.router)  # /healthz, /readyz, /metrics
    app.include_router(dashboard_router(settings))
    return app

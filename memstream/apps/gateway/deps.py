"""What the routes share: the gateway's services (the store shards, the embedder, the producer, the
live-updates hub, the chat model, the drain), and the dependencies that hand them and the caller's
tenant to a route."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated

from aiokafka import AIOKafkaProducer
from fastapi import Depends, HTTPException, Request, Security
from fastapi import Path as PathParam
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from memstream.adapters.embedders import make_embedder
from memstream.adapters.kafka import by_key, client_kwargs, partition_for
from memstream.adapters.llm import LLMClient
from memstream.adapters.settings import Settings
from memstream.adapters.store.shards import Shards
from memstream.apps.gateway.drain import Drain
from memstream.apps.gateway.stores import gateway_shards
from memstream.apps.gateway.updates import UpdateHub
from memstream.core.embedder import Embedder
from memstream.core.store import VectorStore
from memstream.core.validation import Limits, limits_from
from memstream.schemas.events import DEFAULT_TENANT, Identifier

log = logging.getLogger("memstream.gateway")
# POST /v1/turns waits this long for the broker's acks, then answers 503 with Retry-After (the
# producer's own request timeout, 10 s, would hold the client that long when the broker is gone).
SEND_TIMEOUT_S = 5.0
# Where admission leaves the caller's tenant for the ``tenant`` dependency (the request's state).
TENANT_STATE = "memstream.tenant"


@dataclass
class Services:
    settings: Settings
    embedder: Embedder
    shards: Shards
    producer: AIOKafkaProducer
    hub: UpdateHub
    llm: LLMClient | None
    drain: Drain = field(default_factory=Drain)
    # What a turn must satisfy: the ingest processor's own rules, so the gateway refuses with 422
    # what would be dead-lettered.
    limits: Limits = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.limits = limits_from(
            s.limits.max_turn_bytes, s.limits.min_ts, s.limits.max_future_skew_s, s.windows.zone
        )

    def store(self, user_key: str) -> VectorStore:
        return self.shards.get(partition_for(user_key.encode(), self.settings.kafka.topic_partitions))


@asynccontextmanager
async def services(settings: Settings) -> AsyncIterator[Services]:
    if settings.gateway.api_keys is None:
        log.warning("MEMSTREAM_API_KEYS unset: no authentication, every request is tenant %r", DEFAULT_TENANT)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per store call otherwise
    embedder = await asyncio.to_thread(make_embedder, settings.embedding)
    shards = gateway_shards(settings, embedder.dim)
    producer = AIOKafkaProducer(
        **client_kwargs(settings), partitioner=by_key, acks="all", request_timeout_ms=10_000
    )
    await producer.start()
    hub = UpdateHub(settings)
    await hub.start()
    llm = LLMClient(settings.llm) if settings.llm.llm_base_url else None
    try:
        yield Services(settings, embedder, shards, producer, hub, llm)
    finally:
        await hub.stop()
        await producer.stop()
        if llm:
            await llm.aclose()
        shards.close()


def svc_of(request: Request) -> Services:
    svc: Services = request.app.state.svc
    return svc


# Declared so that the OpenAPI document names both ways to send a key (the docs page's Authorize
# button, generated clients); the key itself is read and checked by the Gate, before any route.
BEARER = HTTPBearer(auto_error=False, description="`Authorization: Bearer <key>`")
API_KEY = APIKeyHeader(name="X-API-Key", auto_error=False, description="the key in `X-API-Key`")


async def tenant(
    request: Request,
    _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
    _key: Annotated[str | None, Security(API_KEY)],
) -> str:
    """The caller's tenant, as the ``Gate`` found it from the API key before admitting the request
    (and its rate limit); none there is a 401 (a route the gate did not see as needing one)."""
    found: str | None = request.scope.get("state", {}).get(TENANT_STATE)
    if found is None:
        raise HTTPException(401, "missing or unknown API key", headers={"WWW-Authenticate": "Bearer"})
    return found


Tenant = Annotated[str, Depends(tenant)]
# The ids POST /v1/turns accepts, and no others: every accepted user can be reached and forgotten.
UserId = Annotated[Identifier, PathParam()]
TurnId = Annotated[Identifier, PathParam()]
Svc = Annotated[Services, Depends(svc_of)]

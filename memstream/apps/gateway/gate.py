"""Admission in front of every route: authentication, rate limits, load shedding, the body's
deadline and the request metrics, as one pure ASGI middleware (``Gate``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import orjson
from fastapi import HTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstream.adapters import metrics
from memstream.adapters.settings import GatewaySettings
from memstream.apps.gateway.auth import (
    Bucket,
    digest,
    evict_full,
    parse_keys,
    presented_key,
    take,
    tenant_for,
)
from memstream.apps.gateway.deps import TENANT_STATE, tenant
from memstream.schemas.events import DEFAULT_TENANT

log = logging.getLogger("memstream.gateway")
# Never shed: probes and scrapes must answer while the gateway is saturated.
UNBOUNDED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
SHED_RETRY_AFTER_S = 1


def admit(path: str, in_flight: int, limit: int) -> bool:
    """Whether a request for ``path`` may start while ``in_flight`` others are in progress."""
    return path in UNBOUNDED_PATHS or in_flight < limit


# A response the gate sends itself: status, body, headers.
Refusal = tuple[int, bytes, list[tuple[bytes, bytes]]]


def _refusal(status: int, detail: str, *extra: tuple[bytes, bytes]) -> Refusal:
    body = orjson.dumps({"detail": detail})
    return (
        status,
        body,
        [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra],
    )


RETRY = (b"retry-after", str(SHED_RETRY_AFTER_S).encode())
SHED = _refusal(503, "overloaded: too many requests in flight", RETRY)
KEY_BUSY = _refusal(429, "too many requests in flight for this API key", RETRY)
UNAUTHORIZED = _refusal(401, "missing or unknown API key", (b"www-authenticate", b"Bearer"))
INTERNAL = _refusal(500, "internal error")


@dataclass(frozen=True)
class Admission:
    """What the gateway admits: the key table (None: no auth, one tenant), the rate limit per key,
    the slots in flight in all and per key, and the time a body may take."""

    keys: dict[bytes, str] | None
    rate_per_s: float
    burst: int
    limit: int
    per_key: int
    body_timeout_s: float

    @classmethod
    def of(cls, settings: GatewaySettings) -> Admission:
        keys = parse_keys(settings.api_keys.get_secret_value()) if settings.api_keys else None
        return cls(
            keys,
            settings.rate_limit_per_s,
            settings.rate_limit_burst,
            settings.gateway_max_in_flight,
            settings.gateway_max_in_flight_per_key,
            settings.gateway_body_timeout_s,
        )


def needs_tenant(route: BaseRoute) -> bool:
    """Whether ``route`` depends, at any depth, on the caller's tenant (so needs a valid key)."""
    dependant = getattr(route, "dependant", None)
    stack = [dependant] if dependant is not None else []
    while stack:
        d = stack.pop()
        if d.call is tenant:
            return True
        stack.extend(d.dependencies)
    return False


class Gate:
    """Admission, load shedding and request metrics as one pure ASGI middleware (no per-request
    task group, stream or Request object, so a refusal costs a few dict lookups and two sends: the
    refusals must stay cheap or a saturated event loop answers them late). In the event loop (no
    lock), before any slot or body is taken: a route that needs a tenant gets 401 without a known
    key and 429 past its key's rate limit or its ``per_key`` requests in flight; past ``limit``
    requests in flight, 503 with Retry-After; probes and scrapes never wait. A slot is held until
    the response starts (an SSE stream holds none), and the body must arrive within
    ``body_timeout_s`` (408), so slow senders cannot hold slots for long, nor more than ``per_key``.
    An unhandled error is answered 500 and logged as its type and route only: the traceback of an
    error raised while handling a request can carry the request's text."""

    def __init__(self, app: ASGIApp, admission: Admission) -> None:
        self.app = app
        self.admission = admission
        self.in_flight = 0
        self.by_key: dict[bytes, int] = {}
        self.buckets: dict[bytes, Bucket] = {}
        self.swept_at = time.monotonic()
        # Whether a route needs a tenant, by id(route): routes are not hashable, and live as long as the app.
        self.protected: dict[int, bool] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        route = _route_of(scope)
        name = getattr(route, "path", "unmatched")
        if scope["path"] in UNBOUNDED_PATHS:
            await self._run(scope, receive, send, name, t0, None)
            return
        owner, refusal = self._admit(scope, route, name)
        if refusal is not None:
            status, body, headers = refusal
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            _count(name, status, t0)
            return
        self.in_flight += 1
        metrics.GATEWAY_IN_FLIGHT.set(self.in_flight)
        if owner is not None:
            self.by_key[owner] = self.by_key.get(owner, 0) + 1
        deadline = asyncio.get_running_loop().time() + self.admission.body_timeout_s
        await self._run(
            scope, _body_by(receive, deadline, self.admission.body_timeout_s), send, name, t0, owner
        )

    def _admit(self, scope: Scope, route: BaseRoute | None, name: str) -> tuple[bytes | None, Refusal | None]:
        """The key whose slot the request takes (None where its route needs no tenant), or the
        refusal; the caller's tenant goes to the request's state."""
        owner = None
        if route is not None and self._protected(route):
            found, owner = self._identify(scope)
            if found is None:
                return None, UNAUTHORIZED
            wait = self._take(owner)
            if wait > 0:
                metrics.RATE_LIMITED.inc()
                return None, _refusal(
                    429, "rate limit exceeded", (b"retry-after", str(max(1, round(wait))).encode())
                )
            if self.by_key.get(owner, 0) >= self.admission.per_key:
                metrics.GATEWAY_SHED.labels(name, "key").inc()
                return None, KEY_BUSY
            scope.setdefault("state", {})[TENANT_STATE] = found
        if not admit(scope["path"], self.in_flight, self.admission.limit):
            metrics.GATEWAY_SHED.labels(name, "gateway").inc()
            return None, SHED
        return owner, None

    def _protected(self, route: BaseRoute) -> bool:
        known = self.protected.get(id(route))
        if known is None:
            known = self.protected[id(route)] = needs_tenant(route)
        return known

    def _identify(self, scope: Scope) -> tuple[str | None, bytes]:
        """The caller's tenant (None: no known key) and what its rate limit and slots are counted
        by: its key, or without keys its address (a key then means nothing, and a client could
        name a new one per request)."""
        if self.admission.keys is None:
            client = scope.get("client")
            return DEFAULT_TENANT, (client[0] if client else "").encode()
        presented = presented_key(scope["headers"])
        return (tenant_for(self.admission.keys, presented) if presented else None), digest(presented or "")

    def _take(self, owner: bytes) -> float:
        """A token of ``owner``'s bucket: 0.0, or the seconds until one is back. Buckets that have
        refilled are dropped every refill period, so the table stays as small as the callers of
        the last few seconds."""
        a, now = self.admission, time.monotonic()
        if now - self.swept_at >= a.burst / a.rate_per_s:
            self.buckets, self.swept_at = evict_full(self.buckets, now, a.rate_per_s, a.burst), now
        self.buckets[owner], wait = take(self.buckets.get(owner), now, a.rate_per_s, a.burst)
        return wait

    async def _run(
        self, scope: Scope, receive: Receive, send: Send, name: str, t0: float, owner: bytes | None
    ) -> None:
        holding = scope["path"] not in UNBOUNDED_PATHS
        responded = False

        def release() -> None:
            nonlocal holding
            holding = False
            self.in_flight -= 1
            metrics.GATEWAY_IN_FLIGHT.set(self.in_flight)
            if owner is not None:
                left = self.by_key.pop(owner) - 1
                if left:
                    self.by_key[owner] = left

        async def started(message: Message) -> None:
            nonlocal responded
            if message["type"] == "http.response.start" and not responded:
                responded = True
                if holding:
                    release()
                _count(getattr(scope.get("route"), "path", name), message["status"], t0)
            await send(message)

        try:
            await self.app(scope, receive, started)
        except Exception as exc:  # the last line of defence: answer, and log no request data
            log.error("unhandled %s on %s %s", type(exc).__name__, scope["method"], name)
            if not responded:
                status, body, headers = INTERNAL
                await started({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
        finally:
            if holding:
                release()


def _route_of(scope: Scope) -> BaseRoute | None:
    routes = reachable(scope["app"].router.routes)
    return next((r for r in routes if r.matches(scope)[0] == Match.FULL), None)


def reachable(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    """The routes a request can reach, in the router's order. FastAPI keeps an included router as one
    route holding it (``original_router``), which has no path or dependencies of its own: the gate
    must see the routes inside, or it would take every route for one that needs no tenant. The
    gateway includes its routers without a prefix, so the inner routes match the request's path."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is None:
            yield route
        else:
            yield from reachable(inner.routes)


def _count(name: str, status: int, t0: float) -> None:
    metrics.GATEWAY_REQUESTS.labels(name, str(status)).inc()
    metrics.GATEWAY_SECONDS.labels(name).observe(time.perf_counter() - t0)  # to the response's start


def _body_by(receive: Receive, deadline: float, timeout_s: float) -> Receive:
    """``receive`` with the whole body due by ``deadline`` (loop time): 408 after it. Once the body
    is in, later calls (a stream waiting for the client to leave) wait as long as they need."""
    body_done = False

    async def timed() -> Message:
        nonlocal body_done
        if body_done:
            return await receive()
        try:
            async with asyncio.timeout_at(deadline):
                message = await receive()
        except TimeoutError:
            # FastAPI re-raises an HTTPException from reading the body, and answers it.
            raise HTTPException(
                408, f"request body not received within {timeout_s:g} s", headers={"Connection": "close"}
            ) from None
        body_done = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    return timed

"""A worker's internal port: the embedded store it holds, for gateways, and nothing else.

With the embedded store only the worker that owns a partition may open its shard, so a gateway reads
and forgets through that worker: ``POST /store/{partition}/{op}`` (``remote_store``) and
``POST /recall/{partition}`` (``remote_recall``, run here by :class:`Recalls`). Those pages return
users' text and delete users, so they are not on the status port (``/metrics``, ``/status``,
``streams/pages.py``), which anyone who can scrape a worker reaches: they are on a port of their own
(``internal_host``, 127.0.0.1 unless set), and every request must carry the gateways' token
(``internal_token``) as ``Authorization: Bearer``, or it gets 401. Each store operation is one a gateway
sends, pinned to one user (``remote_store.confinement``): nothing on this port reads or empties a whole
partition.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import socket
import time
from collections.abc import Awaitable, Callable

import faust
from aiohttp import web
from mode import Service

from memstream.adapters import metrics
from memstream.adapters.settings import Settings
from memstream.core.embedder import Embedder
from memstream.core.store import VectorStore
from memstream.embedded_store.read_leases import ReadLeases
from memstream.embedded_store.remote_recall import serve_recall
from memstream.embedded_store.remote_store import serve

log = logging.getLogger("memstream")

# (status, body) of a page for a partition and a request body.
Answer = tuple[int, bytes]


def authorized(header: str | None, token: bytes | None) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (compared in constant time). No token
    configured: nobody is."""
    if token is None or header is None:
        return False
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token)


def store_answer(
    held: Callable[[], set[int]], store_of: Callable[[int], VectorStore]
) -> Callable[[str, str, bytes], Answer]:
    """``POST /store/{partition}/{op}``: a gateway's store call on a partition held here, confined."""

    def answer(partition: str, op: str, body: bytes) -> Answer:
        if not partition.isdigit() or int(partition) not in held():
            return 409, f"partition {partition} is not held here".encode()
        try:
            return 200, serve(store_of(int(partition)), op, body, confined=True)
        except ValueError as exc:
            return 400, str(exc).encode()

    return answer


class Recalls:
    """A gateway's recall, run here on a partition this worker holds: one request instead of one
    per store call. In a thread, so the event loop keeps ingesting, under a lease that keeps a
    rebalance from closing the shard meanwhile; past ``leases.limit`` recalls at once, 503 (the
    gateway sheds it) rather than a queue that would starve ingest."""

    def __init__(
        self,
        held: Callable[[], set[int]],
        leases: ReadLeases,
        store_of: Callable[[int], VectorStore],
        embedder: Embedder,
    ) -> None:
        self.held = held
        self.leases = leases
        self.store_of = store_of
        self.embedder = embedder

    async def answer(self, partition: str, query: bytes) -> tuple[int, bytes]:
        """HTTP status and body (the answer, or the error's reason) of ``POST /recall/{partition}`` on the
        internal port."""
        # No await between the check and the lease: a rebalance cannot close the shard in between.
        if not partition.isdigit() or int(partition) not in self.held():
            return 409, f"partition {partition} is not held here".encode()
        p = int(partition)
        if not self.leases.try_enter(p):
            metrics.WORKER_RECALLS_SHED.inc()
            return 503, f"{self.leases.limit} recalls already running on this worker".encode()
        asked = time.perf_counter()

        def run() -> bytes:
            started = time.perf_counter()
            metrics.WORKER_RECALL_SECONDS.labels("queued").observe(started - asked)
            try:
                return serve_recall(self.store_of(p), self.embedder, query)
            finally:
                metrics.WORKER_RECALL_SECONDS.labels("run").observe(time.perf_counter() - started)

        try:
            return 200, await asyncio.to_thread(run)
        except ValueError as exc:
            return 400, str(exc).encode()
        finally:
            self.leases.exit(p)


def internal_app(
    token: bytes | None,
    store: Callable[[str, str, bytes], Answer],
    recall: Callable[[str, bytes], Awaitable[Answer]],
) -> web.Application:
    """The internal port's pages; every request, to a page or not, first shows the token."""

    @web.middleware
    async def credential(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not authorized(request.headers.get("Authorization"), token):
            return _error(
                401, "missing or wrong token (MEMSTREAM_INTERNAL_TOKEN)", {"WWW-Authenticate": "Bearer"}
            )
        return await handler(request)

    async def store_page(request: web.Request) -> web.StreamResponse:
        body = await request.read()  # first: no await between the held check and the store's use
        info = request.match_info
        return _answer(*store(info["partition"], info["op"], body))

    async def recall_page(request: web.Request) -> web.StreamResponse:
        return _answer(*await recall(request.match_info["partition"], await request.read()))

    app = web.Application(middlewares=[credential])
    app.router.add_post("/store/{partition}/{op}", store_page)
    app.router.add_post("/recall/{partition}", recall_page)
    return app


def _answer(status: int, body: bytes) -> web.Response:
    if status != 200:
        return _error(status, body.decode())
    return web.Response(body=body, content_type="application/json")


def _error(status: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=headers)


def bind(host: str, port: int) -> socket.socket:
    """The internal port's socket, bound and listening now: a port in use fails the start, port 0 is
    chosen now for ``/status`` to name, and a gateway that reads that name before the app has started
    waits in the backlog until it is served instead of being refused."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def internal_server(app: web.Application, sock: socket.socket) -> type[Service]:
    """A service (for ``faust.App.service``) that serves ``app`` on ``sock`` while the worker runs."""

    class InternalPort(Service):
        runner: web.AppRunner | None = None

        async def on_start(self) -> None:
            self.runner = web.AppRunner(app, access_log=None)
            await self.runner.setup()
            await web.SockSite(self.runner, sock).start()

        async def on_stop(self) -> None:
            if self.runner is not None:
                await self.runner.cleanup()

    return InternalPort


def serve_internal(
    app: faust.App,
    settings: Settings,
    held: Callable[[], set[int]],
    store_of: Callable[[int], VectorStore],
    embedder: Embedder,
    leases: ReadLeases,
) -> int | None:
    """The internal port, with the embedded store only (a Qdrant server is read by gateways directly)
    and with the status port, where gateways find it; its number, or None."""
    if settings.storage.store != "edge" or not settings.worker.metrics_port:
        return None
    token = settings.worker.internal_token
    sock = bind(settings.worker.internal_host, settings.worker.internal_port)
    pages = internal_app(
        token.get_secret_value().encode() if token else None,
        store_answer(held, store_of),
        Recalls(held, leases, store_of, embedder).answer,
    )
    app.service(internal_server(pages, sock))
    port: int = sock.getsockname()[1]
    log.info("internal port (store and recall for gateways) on %s:%d", settings.worker.internal_host, port)
    return port

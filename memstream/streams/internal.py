"""A worker's internal port: the embedded store it holds, for gateways, and nothing else.

With the embedded store only the worker that owns a partition may open its shard, so a gateway reads
and forgets through that worker: ``POST /store/{partition}/{op}`` (``memstream.adapters.store.remote``)
and ``POST /recall/{partition}`` (``memstream.adapters.remote_recall``). Those pages return users' text
and delete users, so they are not on the status port (``/metrics``, ``/status``, ``streams/pages.py``),
which anyone who can scrape a worker reaches: they are on a port of their own (``internal_host``,
127.0.0.1 unless set), and every request must carry the gateways' token (``internal_token``) as
``Authorization: Bearer``, or it gets 401. Each store operation is one a gateway sends, pinned to one
user (``remote.confinement``): nothing on this port reads or empties a whole partition.
"""

from __future__ import annotations

import hmac
import socket
from collections.abc import Awaitable, Callable

from aiohttp import web
from mode import Service

from memstream.adapters.store.remote import serve
from memstream.core.store import VectorStore

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
    """The internal port's socket, bound now (a port in use fails the start; port 0 is chosen now, for
    ``/status`` to name) and listening once the app has started."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
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

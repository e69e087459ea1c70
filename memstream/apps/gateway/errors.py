"""How the gateway answers what went wrong: the error responses every route documents, and the
handlers that shape FastAPI's and Starlette's own (a 422 that echoes no large input, a 405 that lists
every method) and answer an unavailable store or broker with 503 and Retry-After."""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.errors import KafkaError
from fastapi import Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from memstream.apps.gateway.gate import reachable
from memstream.core.store import StoreUnavailable
from memstream.schemas.api import Problem

log = logging.getLogger("memstream.gateway")
# A 422 lists this many errors at most, each input cut to this many characters.
MAX_ERRORS = 20
ECHO_CHARS = 100

# The errors any route may answer, as the OpenAPI document declares them.
RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "the body is not JSON"},
    401: {"model": Problem, "description": "missing or unknown API key"},
    403: {"model": Problem, "description": "a turn names another tenant than the key's"},
    408: {"model": Problem, "description": "the body did not arrive within MEMSTREAM_GATEWAY_BODY_TIMEOUT_S"},
    413: {"model": Problem, "description": "request body too large"},
    429: {
        "model": Problem,
        "description": "rate limit, or the key's requests in flight; retry after Retry-After seconds",
    },
    503: {
        "model": Problem,
        "description": "overloaded, draining, broker or store unavailable; retry after Retry-After",
    },
}


async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 echoes each error's whole input (1 MB in, 3 MB out) and fails to write one
    holding a lone surrogate: the errors' location, message and type, and a short input."""
    errors = [_brief(e) for e in exc.errors()[:MAX_ERRORS]]
    return JSONResponse({"detail": errors}, status_code=422)


async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
    """Starlette's 405 lists the methods of the first route of the path only: every route's."""
    if exc.status_code != 405:
        return await http_exception_handler(request, exc)
    routes = reachable(request.app.router.routes)
    methods = {
        m for r in routes if r.matches(request.scope)[0] != Match.NONE for m in getattr(r, "methods", ())
    }
    return JSONResponse(
        {"detail": exc.detail}, status_code=405, headers={"Allow": ", ".join(sorted(methods))}
    )


async def store_down(request: Request, exc: StoreUnavailable) -> JSONResponse:
    log.warning("store unavailable: %s", exc)
    return JSONResponse({"detail": "store unavailable"}, status_code=503, headers={"Retry-After": "2"})


async def broker_down(request: Request, exc: KafkaError) -> JSONResponse:
    log.warning("broker unavailable: %r", exc)
    return JSONResponse({"detail": "broker unavailable"}, status_code=503, headers={"Retry-After": "2"})


HANDLERS = {
    RequestValidationError: invalid,
    StarletteHTTPException: http_error,
    StoreUnavailable: store_down,
    KafkaError: broker_down,
}


def _printable(value: object) -> object:
    """A string capped at ECHO_CHARS and writable as UTF-8 (a lone surrogate escaped); other
    values as they are."""
    if not isinstance(value, str):
        return value
    return value[:ECHO_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")


def _brief(error: Any) -> dict[str, Any]:
    """One validation error as the 422 shows it: its input only when a scalar, capped."""
    out = {
        "loc": [_printable(p) for p in error["loc"]],
        "msg": _printable(error["msg"]),
        "type": error["type"],
    }
    if isinstance(error.get("input"), str | int | float | bool):
        out["input"] = _printable(error["input"])
    return out

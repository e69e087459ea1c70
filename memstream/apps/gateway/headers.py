"""uvicorn's h11 protocol with a deadline for a request's headers.

uvicorn (0.54) bounds the idle time between requests (``timeout_keep_alive``) but restarts it on
every byte received, and has no deadline for the headers themselves: a client sending one byte a
second holds a connection for ever (h11 bounds their size, 16 KiB, not their time). Here a
request's headers must be complete within ``timeout_s`` of the connection opening or of the
previous response; else the connection is closed (there is no request yet to answer). The body
has its own deadline in the gateway's ``Gate``.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class HeadersBy(H11Protocol):
    timeout_s: ClassVar[float] = 10.0

    _timer: asyncio.TimerHandle | None = None
    _served = 0  # responses completed on this connection

    @classmethod
    def within(cls, timeout_s: float) -> type[HeadersBy]:
        """This protocol with ``timeout_s`` (uvicorn takes a protocol class, not an instance)."""
        return type("HeadersBy", (cls,), {"timeout_s": timeout_s})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        self._served += 1
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(self.timeout_s, self._late, self._served)

    def _late(self, served: int) -> None:
        # Still waiting for the headers of the request that follows response ``served``: no
        # response completed since, and the client's side has not finished a request's headers.
        if served == self._served and self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()

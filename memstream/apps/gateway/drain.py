"""Draining: the gateway stops admitting turns while reads go on.

``memstream up`` sends its gateway SIGUSR1 when it is asked to stop: from then on
``POST /v1/turns`` answers 503 with Retry-After, and ``/readyz`` answers 503 with how many turn
requests are still waiting for the broker's acks. Once none are, every turn answered 202 is in
the turns topic, and ``up`` waits for the workers to store them (memstream/apps/drain.py).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from fastapi import HTTPException

log = logging.getLogger("memstream.gateway")
DRAIN_SIGNAL = signal.SIGUSR1
DRAIN_RETRY_AFTER_S = 5


@dataclass
class Drain:
    """Whether turns are still admitted, and how many turn requests are in progress (in the event
    loop: no lock)."""

    draining: bool = False
    turns_in_flight: int = 0

    def start(self) -> None:
        if not self.draining:
            log.info("draining: no more turns admitted (%d requests in flight)", self.turns_in_flight)
        self.draining = True

    @contextmanager
    def admit(self) -> Iterator[None]:
        """Hold a turn request while it is in progress; 503 once draining."""
        if self.draining:
            raise HTTPException(
                503, "draining: this gateway is stopping", headers={"Retry-After": str(DRAIN_RETRY_AFTER_S)}
            )
        self.turns_in_flight += 1
        try:
            yield
        finally:
            self.turns_in_flight -= 1

    def report(self) -> dict[str, object]:
        return {"ready": False, "draining": True, "turns_in_flight": self.turns_in_flight}

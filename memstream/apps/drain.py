"""Stopping ``memstream up`` with the embedded broker without losing a turn it accepted.

Tansu keeps its log in memory: what the workers have not stored when it stops is gone. So when
``up`` is asked to stop (SIGTERM, Ctrl-C), before it stops anything it

1. tells its gateway to stop admitting turns (503 with Retry-After from then on; reads go on) and
   waits until the turn requests in progress there have their acks (the gateway's ``/readyz``
   says how many): from then on every turn answered 202 is in the turns topic;
2. waits until the workers' consumer group has committed every record of the turns topic, that
   is until they have stored every unit; then, with the time left, until consolidation has
   settled (its topics are in memory too);

all within ``MEMSTREAM_STOP_DRAIN_S``; past it, the log says how many turns were not stored.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from memstream.adapters.kafka import settled, unconsumed
from memstream.adapters.settings import Settings
from memstream.apps.gateway.drain import DRAIN_SIGNAL
from memstream.schemas.topics import TURNS

log = logging.getLogger("memstream")
POLL_S = 0.5
PROGRESS_EVERY_S = 5.0


def drain(
    settings: Settings, gateway: subprocess.Popen[bytes] | None, workers: Sequence[subprocess.Popen[bytes]]
) -> int:
    """Stop admitting turns and wait for the workers to store the admitted ones; how many turns
    were left unstored when the time ran out (0: none)."""
    t0 = time.monotonic()
    deadline = t0 + settings.worker.stop_drain_s
    log.info("stopping: storing the accepted turns first (at most %.0fs)", settings.worker.stop_drain_s)
    if gateway is not None and gateway.poll() is None:
        gateway.send_signal(DRAIN_SIGNAL)
        _wait_gateway(settings, gateway, deadline)

    def working() -> bool:
        return time.monotonic() < deadline and any(w.poll() is None for w in workers)

    left = asyncio.run(_wait_stored(settings, working))
    if left:
        log.error(
            "stopping after %.0fs (MEMSTREAM_STOP_DRAIN_S) with %d accepted turns not stored: they are lost",
            time.monotonic() - t0,
            left,
        )
        return left
    log.info("every accepted turn stored after %.1fs", time.monotonic() - t0)
    if asyncio.run(_wait_settled(settings, working)):
        log.info("consolidation settled after %.1fs; stopping", time.monotonic() - t0)
    else:
        log.warning("stopping with consolidation in progress: it is lost with the broker's memory")
    return 0


def _wait_gateway(settings: Settings, gateway: subprocess.Popen[bytes], deadline: float) -> None:
    """Until the draining gateway has no turn request in progress (or has exited)."""
    host = (
        "127.0.0.1"
        if settings.gateway.gateway_host in ("0.0.0.0", "::", "")
        else settings.gateway.gateway_host
    )
    url = f"http://{f'[{host}]' if ':' in host else host}:{settings.gateway.gateway_port}/readyz"
    while gateway.poll() is None and time.monotonic() < deadline:
        state = _readiness(url)
        if state is None or (state.get("draining") and state.get("turns_in_flight") == 0):
            return
        time.sleep(0.05)


def _readiness(url: str) -> dict[str, Any] | None:
    """The gateway's /readyz answer: None when it is not listening (so it has admitted no turn),
    empty when it does not answer in time or not in JSON."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            body = resp.read()  # 200: the signal not handled yet
    except urllib.error.HTTPError as exc:
        body = exc.read()
    except urllib.error.URLError as exc:
        return None if isinstance(exc.reason, ConnectionRefusedError) else {}
    except OSError:
        return {}
    try:
        state = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return state if isinstance(state, dict) else {}


async def _wait_stored(settings: Settings, working: Callable[[], bool]) -> int:
    """Until the group has committed the whole turns topic; the turns not committed when the
    time ran out or the last worker exited."""
    topic = settings.kafka.topic(TURNS.name)
    reported = time.monotonic()
    while left := await unconsumed(settings, topic):
        if not working():
            return left
        if time.monotonic() - reported >= PROGRESS_EVERY_S:
            log.info("stopping: %d accepted turns not stored yet", left)
            reported = time.monotonic()
        await asyncio.sleep(POLL_S)
    return 0


async def _wait_settled(settings: Settings, working: Callable[[], bool]) -> bool:
    """Until consolidation has nothing in flight; whether it got there in time."""
    while working():
        if await settled(settings):
            return True
        await asyncio.sleep(POLL_S)
    return False

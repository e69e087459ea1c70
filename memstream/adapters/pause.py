"""Waiting out an unavailable store: the agent pauses on the batch it holds, its input offsets
stay uncommitted, and it runs the same batch again when the store answers. Nothing is skipped;
processing is idempotent on redelivery (deterministic ids), so a partly written batch is safe to
run again."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from memstream.adapters import metrics
from memstream.core.store import StoreUnavailable

T = TypeVar("T")
log = logging.getLogger("memstream")

FIRST_DELAY_S = 0.5
MAX_DELAY_S = 10.0


def next_delay(delay: float) -> float:
    """Exponential, capped: an outage of minutes costs a few tries a minute, a blip half a second."""
    return min(delay * 2, MAX_DELAY_S)


async def until_available(
    step: Callable[[], Awaitable[T]], stage: str, sleep: Callable[[float], Awaitable[None]]
) -> T:
    """``step()``, run again after a pause for as long as it raises :class:`StoreUnavailable`."""
    delay = FIRST_DELAY_S
    while True:
        try:
            result = await step()
        except StoreUnavailable as exc:
            metrics.STORE_PAUSES.labels(stage).inc()
            metrics.STORE_PAUSED.labels(stage).set(1)
            log.warning("store unavailable in %s (%s): paused, trying again in %.1f s", stage, exc, delay)
            await sleep(delay)
            delay = next_delay(delay)
            continue
        metrics.STORE_PAUSED.labels(stage).set(0)
        return result

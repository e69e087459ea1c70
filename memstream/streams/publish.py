"""The one place the topology's decisions (streams/decisions.py) take effect: their counters, then
every record sent and delivered (acks=all) before the caller's input offsets are acknowledged,
then the memory updates awaited by the next work (streams/read_your_writes.py), then the state
each decision moves on once its records are out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from memstream.adapters import metrics
from memstream.schemas.memory import MemoryUpdate
from memstream.schemas.topics import DEAD_LETTER, DEFERRED, MEMORY_UPDATES, WINDOWS
from memstream.streams.decisions import MADE_AT, DeadLettered, Decision, Deferral, Done, Dropped, Send, sends
from memstream.streams.read_your_writes import OwnWrites

# Sends one record to a topic (by its name without the prefix); awaiting the result waits for
# its delivery. Straight to the producer: the records are bytes already, and faust's channel
# machinery costs more per record than the send itself.
Producer = Callable[[str, bytes, bytes, list[tuple[str, bytes]]], Awaitable[Awaitable[Any]]]


def headers(s: Send) -> list[tuple[str, bytes]]:
    return [] if s.made_at is None else [(MADE_AT, repr(s.made_at).encode())]


class Publisher:
    def __init__(self, send: Producer, own: OwnWrites) -> None:
        self.send = send
        self.own = own

    async def __call__(self, *decisions: Decision) -> None:
        out: list[Send] = []
        updates: list[MemoryUpdate] = []
        after = []
        for d in decisions:
            match d:
                case Dropped(stage, count) if count:
                    metrics.FORGOTTEN_RECORDS.labels(stage).inc(count)
                case DeadLettered(letters, trigger):
                    if trigger:
                        metrics.CONSOLIDATIONS.labels(trigger, "invalid").inc()
                    out += sends(DEAD_LETTER, letters)
                case Deferral(work, trigger, made_at):
                    metrics.CONSOLIDATIONS.labels(trigger, "deferred").inc()
                    out += sends(DEFERRED, [work], made_at)
                case Done():
                    for u in d.updates:
                        metrics.MEMORY_UPDATES.labels(
                            u.op.value, u.memory.kind.value if u.memory else "-"
                        ).inc()
                    if d.trigger:
                        metrics.CONSOLIDATIONS.labels(d.trigger, "done" if d.updates else "nothing").inc()
                    for w in d.windows:  # counted where published: the ingest agent and the idle timer
                        metrics.WINDOWS_CLOSED.labels(w.level.value, w.reason.value).inc()
                    out += [
                        *d.sends,
                        *sends(WINDOWS, d.windows),
                        *sends(MEMORY_UPDATES, d.updates, d.made_at),
                    ]
                    updates += d.updates
                    if d.after is not None:
                        after.append(d.after)
        generations = {u.key: self.own.generation(u.key) for u in updates}
        await asyncio.gather(*[await self.send(s.topic, s.key, s.value, headers(s)) for s in out])
        # A user deleted while the records were on their way: their updates are never indexed.
        self.own.published([u for u in updates if self.own.generation(u.key) == generations[u.key]])
        for step in after:
            step()

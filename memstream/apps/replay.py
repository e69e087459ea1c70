"""Produce conversation files to the turns topic, with a progress bar and rate."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from memstream.adapters.kafka import ensure_topics, producer, wait_processed
from memstream.adapters.settings import Settings
from memstream.apps.datasets import RawRecord
from memstream.schemas.topics import TURNS


@dataclass
class ReplayReport:
    produced: int = 0
    seconds: float = 0.0
    last_offsets: dict[int, int] = field(default_factory=dict)  # partition -> last offset sent
    processed: bool | None = None  # None: not waited for
    wait_seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.produced / self.seconds if self.seconds else 0.0


async def replay(
    settings: Settings,
    records: Iterable[RawRecord],
    *,
    total: int | None = None,
    wait: bool = False,
    wait_timeout: float = 600.0,
    progress: bool = True,
) -> ReplayReport:
    await ensure_topics(settings)
    topic = settings.kafka.topic(TURNS.name)
    report = ReplayReport()
    start = time.perf_counter()
    async with producer(settings) as p:
        pending: list[asyncio.Future[Any]] = []
        with tqdm(total=total, unit="turn", disable=not progress, desc="replay", smoothing=0.1) as bar:
            for rec in records:
                pending.append(
                    await p.send(topic, key=rec.key.encode() if rec.key else None, value=rec.value)
                )
                if len(pending) >= 1000:
                    _collect(await asyncio.gather(*pending), report)
                    bar.update(len(pending))
                    pending = []
            _collect(await asyncio.gather(*pending), report)
            bar.update(len(pending))
    report.seconds = time.perf_counter() - start
    if wait and report.last_offsets:
        t0 = time.perf_counter()
        report.processed = await wait_processed(settings, topic, report.last_offsets, wait_timeout)
        report.wait_seconds = time.perf_counter() - t0
    return report


def _collect(metas: list[Any], report: ReplayReport) -> None:
    for m in metas:
        report.produced += 1
        report.last_offsets[m.partition] = max(report.last_offsets.get(m.partition, -1), m.offset)

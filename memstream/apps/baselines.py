"""The flat baselines of ``memstream eval``: a user's raw turns ranked for a question, without any memory,
then taken in that order into the same token budget as recall. Pure functions over plain data.

Each turn is scored on its ``Speaker: content`` text (what ingest embeds) and shown to the agent as one line
``[8 May 2023] Speaker: content``. Orders:

* ``hybrid``: lam * cosine + (1 - lam) * BM25, lam from ``config.FLAT_HYBRID`` (0.9), BM25 min-max
  normalised over the user's turns;
* ``dense``: cosine only; ``bm25``: BM25 only.

Ties go to the earlier turn. Turns are taken in order, a turn that does not fit what is left of the budget
is skipped (as recall's own selection does); the budget counts the rendered lines and the newlines between
them (characters / 4), so the whole context fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from memstream.core.dates import format_date
from memstream.core.recall.config import FLAT_HYBRID, RecallConfig
from memstream.core.recall.rank import CHARS_PER_TOKEN, bm25_scores

ORDERS = ("hybrid", "dense", "bm25")


@dataclass(frozen=True)
class RawTurn:
    turn_id: str
    text: str  # "Speaker: content", one line per message
    ts: datetime

    @property
    def line(self) -> str:
        return f"[{format_date(self.ts.date())}] {' '.join(self.text.split())}"


def min_max(values: Sequence[float]) -> list[float]:
    """``values`` scaled to [0, 1]; all equal -> all 0."""
    if not values:
        return []
    low, high = min(values), max(values)
    if high <= low:
        return [0.0] * len(values)
    return [(v - low) / (high - low) for v in values]


def rankings(
    turns: Sequence[RawTurn], cosines: Sequence[float], query: str, config: RecallConfig = FLAT_HYBRID
) -> dict[str, list[int]]:
    """Each baseline's order of ``turns`` (indices, best first) for ``query``; ``cosines[i]`` is the
    cosine of ``turns[i]`` to the query; the hybrid weighs them by ``config.lam``."""
    sparse = min_max(bm25_scores(query, [t.text for t in turns]))
    scores = {
        "hybrid": [config.lam * c + (1 - config.lam) * s for c, s in zip(cosines, sparse, strict=True)],
        "dense": list(cosines),
        "bm25": sparse,
    }
    return {name: sorted(range(len(turns)), key=lambda i: (-scores[name][i], i)) for name in ORDERS}


def fill(lines: Sequence[str], order: Sequence[int], budget_tokens: int) -> list[int]:
    """The indices of ``lines`` taken in ``order`` while the joined context fits ``budget_tokens``; a line
    that does not fit what is left is skipped."""
    room = budget_tokens * CHARS_PER_TOKEN
    taken: list[int] = []
    used = 0
    for i in order:
        cost = len(lines[i]) + (1 if taken else 0)  # the newline before every line but the first
        if used + cost <= room:
            taken.append(i)
            used += cost
    return taken


def render(lines: Sequence[str], taken: Sequence[int]) -> str:
    return "\n".join(lines[i] for i in taken)

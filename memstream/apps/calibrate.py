"""Calibrate RecMem's recurrence threshold θ_sim to an embedder's cosine scale.

RecMem consolidates when a new unit has ≥ θ_count earlier same-user units among its top-k
neighbours with cosine ≥ θ_sim (0.7 / 5 / top-10 for casual chat, with RecMem's embedder). The
number does not transfer between embedders (MiniLM puts most neighbours of a chat line at
0.5-0.8, feature hashing at 0.1-0.35); the intent does: a topic *recurs* when about half of the
nearest earlier units are clearly on the same topic, which should be the exception per unit.

Rule (``suggest_theta``): with top_k 10 and θ_count 5, on LoCoMo-style data, take the θ_sim on
the 0.05 grid whose firing rate (ignoring the "already consolidated" marking) is closest to 100
per 1,000 units, i.e. 10%, the middle of a 5-15% band. A unit fires iff its 5th-best earlier
neighbour is ≥ θ_sim, so this is about the 90th percentile of that cosine, rounded to 0.05.

Measured on the LoCoMo dev split (``shared/data/locomo/locomo_dev.json``: 2 users, 788 units,
text = ``units.render_text``, time order; hash at 384 dimensions)::

    θ_sim             0.20   0.25   0.30   0.35   0.40   0.50   0.60   0.70   0.75   0.80   0.85
    minilm fires/1000  987    986    982    978    967    869    635    253   97.7   11.4    0
    hash   fires/1000  675    393  123.1   35.5    6.3      0      0      0      0      0    0

    cosine percentiles     p50    p75    p90    p95    p99
    minilm top-10        0.643  0.709  0.764  0.791  0.844
    minilm neighbour #5  0.636  0.700  0.749  0.774  0.801
    hash   top-10        0.232  0.280  0.331  0.366  0.457
    hash   neighbour #5  0.229  0.273  0.311  0.340  0.384

Chosen defaults: ``MiniLMEmbedder`` 0.75 (98 fires per 1,000; RecMem's 0.7 would fire on 25%),
``HashingEmbedder`` 0.30 (123 per 1,000; 0.35 gives 36). MiniLM's cosines are high partly because
every unit starts with its speaker's name. ``OpenAIEmbedder`` (text-embedding-3-small) uses 0.5:
NOT calibrated here (no endpoint); run ``memstream calibrate`` against yours.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from memstream.core.embedder import Embedder, Vectors

PERCENTILES = (50, 75, 90, 95, 99)
THETA_GRID = tuple(round(0.05 * i, 2) for i in range(21))  # 0.00 … 1.00
TARGET_FIRES_PER_1000 = 100.0
HIST_BIN = 0.05
_ROW_BLOCK = 256  # rows of the similarity matrix held at once (256 × units floats)


class HistogramBin(BaseModel):
    lo: float
    hi: float
    count: int


class GridRow(BaseModel):
    theta_sim: float
    fires_per_1000: float


class CalibrationReport(BaseModel):
    embedder: str
    dim: int
    users: int
    units: int
    top_k: int
    theta_count: int
    #: percentiles of every top-k neighbour cosine
    neighbour_percentiles: dict[str, float]
    #: percentiles of each unit's θ_count-th best neighbour cosine: a unit fires iff it is ≥ θ_sim
    deciding_percentiles: dict[str, float]
    histogram: list[HistogramBin]
    grid: list[GridRow]
    suggested_theta_sim: float


def neighbour_similarities(vectors: Vectors, top_k: int) -> npt.NDArray[np.float32]:
    """Row i: cosines of unit i's ``top_k`` most similar *earlier* units, descending.

    ``vectors`` are one user's unit vectors (L2-normalised) in time order. Units with fewer than
    ``top_k`` predecessors get NaN in the missing places.
    """
    n = len(vectors)
    out = np.full((n, top_k), np.nan, dtype=np.float32)
    for start in range(0, n, _ROW_BLOCK):
        stop = min(start + _ROW_BLOCK, n)
        sims = vectors[start:stop] @ vectors[:stop].T
        # Only units before i are visible to i (strictly lower triangle).
        sims[np.arange(stop)[None, :] >= np.arange(start, stop)[:, None]] = -np.inf
        k = min(top_k, stop)
        top = -np.sort(-np.partition(sims, stop - k, axis=1)[:, stop - k :], axis=1)
        top[np.isneginf(top)] = np.nan
        out[start:stop, :k] = top
    return out


def fires(similarities: npt.NDArray[np.float32], theta_sim: float, theta_count: int) -> npt.NDArray[np.bool_]:
    """Per unit: would recurrence fire (≥ ``theta_count`` neighbours with cosine ≥ ``theta_sim``)?"""
    return np.count_nonzero(similarities >= theta_sim, axis=1) >= theta_count


def suggest_theta(grid: Sequence[GridRow], target_fires_per_1000: float = TARGET_FIRES_PER_1000) -> float:
    """The grid θ whose firing rate is closest to the target; the higher θ on ties."""
    return min(grid, key=lambda r: (abs(r.fires_per_1000 - target_fires_per_1000), -r.theta_sim)).theta_sim


def _percentiles(values: npt.NDArray[np.float32]) -> dict[str, float]:
    if values.size == 0:
        return {}
    return {f"p{p}": round(float(np.percentile(values, p)), 4) for p in PERCENTILES}


def _histogram(values: npt.NDArray[np.float32]) -> list[HistogramBin]:
    if values.size == 0:
        return []
    lo = math.floor(float(values.min()) / HIST_BIN)
    hi = max(math.ceil(float(values.max()) / HIST_BIN), lo + 1)
    edges = np.arange(lo, hi + 1) * HIST_BIN
    counts, _ = np.histogram(values, bins=edges)
    return [
        HistogramBin(lo=round(float(a), 2), hi=round(float(b), 2), count=int(c))
        for a, b, c in zip(edges[:-1], edges[1:], counts, strict=True)
    ]


def report_from_vectors(
    vectors_by_user: Mapping[str, Vectors],
    *,
    embedder: str,
    top_k: int,
    theta_count: int,
    grid: Sequence[float] = THETA_GRID,
) -> CalibrationReport:
    """The calibration report for per-user unit vectors (each list in time order)."""
    dim = next((v.shape[1] for v in vectors_by_user.values()), 0)
    sims = np.concatenate(
        [neighbour_similarities(v, top_k) for v in vectors_by_user.values()]
        or [np.empty((0, top_k), np.float32)]
    )
    units = len(sims)
    rows = [
        GridRow(
            theta_sim=theta,
            fires_per_1000=round(1000 * float(fires(sims, theta, theta_count).sum()) / max(units, 1), 1),
        )
        for theta in grid
    ]
    deciding = sims[:, theta_count - 1] if theta_count <= top_k else np.empty(0, np.float32)
    return CalibrationReport(
        embedder=embedder,
        dim=dim,
        users=len(vectors_by_user),
        units=units,
        top_k=top_k,
        theta_count=theta_count,
        neighbour_percentiles=_percentiles(sims[~np.isnan(sims)]),
        deciding_percentiles=_percentiles(deciding[~np.isnan(deciding)]),
        histogram=_histogram(sims[~np.isnan(sims)]),
        grid=rows,
        suggested_theta_sim=suggest_theta(rows),
    )


def calibrate(
    texts_by_user: dict[str, list[str]], embedder: Embedder, top_k: int, theta_count: int
) -> CalibrationReport:
    """Embed each user's texts (in time order) and report how often recurrence would fire."""
    vectors = {user: embedder.embed(texts) for user, texts in texts_by_user.items()}
    return report_from_vectors(vectors, embedder=embedder.name, top_k=top_k, theta_count=theta_count)


def render(report: CalibrationReport, width: int = 50) -> str:
    """Plain-text report for the CLI."""
    lines = [
        f"embedder {report.embedder} (dim {report.dim}): {report.units} units of {report.users} users,"
        f" top_k {report.top_k}, theta_count {report.theta_count}",
        "",
        f"{'percentile':<17}" + " ".join(f"{k:>6}" for k in report.neighbour_percentiles),
        f"{'top-k neighbours':<17}" + " ".join(f"{v:6.3f}" for v in report.neighbour_percentiles.values()),
        f"{f'neighbour #{report.theta_count}':<17}"
        + " ".join(f"{v:6.3f}" for v in report.deciding_percentiles.values()),
        "",
        "top-k neighbour cosines:",
    ]
    peak = max((b.count for b in report.histogram), default=0) or 1
    lines += [
        f"  [{b.lo:5.2f}, {b.hi:5.2f}) {b.count:7d} {'#' * round(width * b.count / peak)}"
        for b in report.histogram
    ]
    lines += ["", "theta_sim  fires/1000"]
    lines += [
        f"  {r.theta_sim:5.2f}   {r.fires_per_1000:8.1f}"
        + ("  <- suggested" if r.theta_sim == report.suggested_theta_sim else "")
        for r in report.grid
    ]
    return "\n".join(lines)

"""The embedder protocol: texts in, L2-normalised float32 vectors out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    #: short stable name, e.g. ``minilm``; stored with vectors so mixed spaces are detected
    name: str
    #: vector dimension
    dim: int
    #: calibrated recurrence threshold for this embedder's cosine scale (see ``memstream calibrate``)
    default_theta_sim: float

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Return an array of shape (len(texts), dim), rows L2-normalised. Empty input -> (0, dim)."""
        ...


def embed_missing(embedder: Embedder, texts: Sequence[str], stored: Sequence[Vectors | None]) -> Vectors:
    """The vectors of ``texts``: ``stored[i]`` where the store had one for ``texts[i]`` (the vector
    ``embedder`` gave that text when it was stored), the others embedded in one call."""
    kept = {i: v for i, v in enumerate(stored) if v is not None and v.shape == (embedder.dim,)}
    missing = [i for i in range(len(texts)) if i not in kept]
    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    if missing:
        out[missing] = embedder.embed([texts[i] for i in missing])
    for i, v in kept.items():
        out[i] = v
    return out

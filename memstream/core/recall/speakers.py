"""Questions that name a speaker of the conversation ("Where has Melanie camped?").

Every unit opens with its speaker's name ("Melanie: ..."), in its text, its vectors and its words, so a
question that names a speaker matches that speaker's turns on the name alone: MiniLM ranks her short
turns ("Melanie: Wow, what an experience!") above the one that says where she camped, and BM25 (normalised
by its best match) gives a turn full marks for the name when no turn says the question's other words.
The name says whose turns to read, not what they say. Recall therefore also scores the question without
the names of the speakers it names (``engine``): its dense query once more with them taken out, and its
BM25 words without them. Pure functions here; the speakers are those of the candidate units, the
conversation's own metadata, not a list of names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from memstream.core.lexical import tokenize


def named_speakers(query: str, speakers: Iterable[str]) -> list[str]:
    """The ``speakers`` the query names: every content word of the speaker's name is a word of the
    query (case-insensitive; "Melanie's" names Melanie). Sorted, each once."""
    words = set(tokenize(_drop_possessives(query)))
    return sorted({s for s in speakers if (name := set(tokenize(s))) and name <= words})


def without_names(query: str, names: Iterable[str]) -> str:
    """``query`` with every word of ``names`` taken out, possessive included ("Where has Melanie
    camped?" -> "Where has camped?"; "Melanie's kids" -> "kids"), whitespace collapsed."""
    words = sorted({w for n in names for w in re.findall(r"\w+", n)}, key=len, reverse=True)
    if not words:
        return query
    alternatives = "|".join(map(re.escape, words))
    pattern = re.compile(rf"\b(?:{alternatives})(?:['’]s)?\b", re.IGNORECASE)
    return " ".join(pattern.sub(" ", query).split())


def _drop_possessives(text: str) -> str:
    return re.sub(r"['’]s\b", "", text)


def mix(
    vector: npt.NDArray[np.float32], speakerless: npt.NDArray[np.float32], weight: float
) -> tuple[npt.NDArray[np.float32], float]:
    """The unit-length query vector whose cosines rank as ``(1 - weight) * cosine(vector) + weight *
    cosine(speakerless)``, and the factor that turns its cosines into that blend: cosine is linear in the
    query, so one search with the mix scores every candidate as the two searches' blend would."""
    mixed = (1 - weight) * vector + weight * speakerless
    norm = float(np.linalg.norm(mixed))
    if norm == 0.0:
        return vector, 1.0
    return (mixed / norm).astype(np.float32), norm

"""Which sentences to keep: TF-IDF centrality, weighted up for claims and dates, small talk last."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from zoneinfo import ZoneInfo

import numpy as np
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfVectorizer

from memstream.consumers.extractive.claims import classify, has_subject
from memstream.consumers.extractive.sentences import (
    INTERJECTIONS,
    WORD,
    Sentence,
    is_i,
    is_question,
    is_trivial,
    sentence_key,
    strip_notes,
)
from memstream.core.semantic_time import extract_event_times

PHATIC_WORDS = 3  # a sentence with no claim, name, number or time and this few content words names nothing

# Centrality is weighted up for sentences that say something about the speaker or name a time:
# without it, chat reactions ("Wow, what an amazing family pic!") win on shared vocabulary alone.
CLAIM_BONUS = 1.0
DATED_BONUS = 0.25


def centrality(texts: Sequence[str]) -> list[float]:
    """Cosine of each text's TF-IDF vector (fitted on ``texts`` only) to the centroid of them all."""
    if not texts:
        return []
    try:
        matrix = TfidfVectorizer(stop_words="english", sublinear_tf=True).fit_transform(texts)
    except ValueError:  # not one content word among them
        return [0.0] * len(texts)
    centroid = np.asarray(matrix.mean(axis=0)).ravel()
    norm = float(np.linalg.norm(centroid))
    if norm == 0.0:
        return [0.0] * len(texts)
    scores = np.asarray(matrix @ centroid).ravel() / norm  # rows are already unit length
    return [round(float(x), 9) for x in scores]  # rounding: float noise never decides an order


def _weight(s: Sentence) -> float:
    claim = has_subject(s) and classify(strip_notes(s.text)) is not None
    return 1.0 + (CLAIM_BONUS if claim else 0.0) + (DATED_BONUS if s.events else 0.0)


def rank(pool: Sequence[Sentence]) -> list[Sentence]:
    """Most central first (centrality times the sentence's weight); ties by time, then position."""
    central = centrality([strip_notes(s.text) for s in pool])
    scores = [round(c * _weight(s), 9) for c, s in zip(central, pool, strict=True)]
    return [s for _, s in sorted(zip(scores, pool, strict=True), key=lambda p: (-p[0], p[1].order))]


_VOCATIVE = re.compile(r",\s*[A-Z][\w'’-]*(?=\s*[,.!?]|$)")  # "Wow, Caroline, ...": an address, not a name


def is_phatic(text: str) -> bool:
    """Small talk that names nothing: trivial, or no claim about the speaker, no time, no name or
    number, and at most PHATIC_WORDS content words ("Let's plan something special!", "It means a
    lot to share this with you")."""
    if is_trivial(text):
        return True
    plain = strip_notes(text)
    if classify(plain) is not None or extract_event_times(
        plain, datetime(2000, 1, 1, tzinfo=ZoneInfo("UTC"))
    ):
        return False
    words = WORD.findall(_VOCATIVE.sub("", plain))
    if any(w[0].isdigit() or (i > 0 and w[0].isupper() and not is_i(w)) for i, w in enumerate(words)):
        return False
    stems = (w.lower().replace("’", "'").split("'")[0] for w in words)  # "it's" -> "it"
    content = [w for w in stems if w not in ENGLISH_STOP_WORDS and w not in INTERJECTIONS and len(w) > 2]
    return len(content) <= PHATIC_WORDS


def informative(pool: Sequence[Sentence]) -> list[Sentence]:
    """The best non-empty tier of ``pool``: statements that name something, else any statement,
    else questions, else small talk."""
    substantial = [s for s in pool if not is_trivial(s.text)]
    statements = [s for s in substantial if not is_question(s.text)]
    named = [s for s in statements if not is_phatic(s.text)]
    return named or statements or substantial or list(pool)


def substantive(pool: Sequence[Sentence]) -> list[Sentence]:
    """What an episode may quote: the best tier of ``pool`` less small talk, so none when its turns
    only exchanged pleasantries. An episode that recalls "Sounds like a lot." crowds out the turns."""
    said = [s for s in pool if not is_phatic(s.text)]
    return [s for s in said if not is_question(s.text)] or said


def select(
    ranked: Iterable[Sentence],
    limit: int,
    max_words: int | None = None,
    skip: frozenset[tuple[str, str]] = frozenset(),
) -> list[Sentence]:
    """The first ``limit`` distinct sentences of ``ranked`` within ``max_words`` (the first always)."""
    chosen: list[Sentence] = []
    seen = set(skip)
    words = 0
    for s in ranked:
        if len(chosen) >= limit:
            break
        key = sentence_key(s)
        size = len(WORD.findall(s.text))
        if key in seen or (chosen and max_words is not None and words + size > max_words):
            continue
        seen.add(key)
        chosen.append(s)
        words += size
    return chosen


def in_time_order(chosen: Iterable[Sentence]) -> list[Sentence]:
    return sorted(chosen, key=lambda s: s.order)

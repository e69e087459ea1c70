"""The scores of ``memstream eval consolidation``: pure functions over plain strings and counts (no
pipeline, no store, no HTTP), so that a report can be recomputed from its rows alone.

* **words**: lowercase ``[a-z0-9']+`` runs (a typographic apostrophe counts as ``'``), a possessive
  ``'s`` and stray apostrophes stripped, scikit-learn's ``ENGLISH_STOP_WORDS`` removed (already a
  dependency; the extractive writer uses the same list). Recall's own shorter list
  (``memstream.core.lexical``) is not used: these scores must not move when recall's tuning does.
* **held**: a statement (a gold observation or event) is held by a set of texts when one text contains
  at least ``HELD_SHARE`` of the statement's distinct content words, the speaker's name left out (an
  observation names its speaker, and so do most memories: the name alone proves nothing). A statement
  with no content word besides the name is not scored.
* **ROUGE-1 F1** and **ROUGE-2 recall** over the same words (clipped counts of unigrams and of adjacent
  content-word pairs), candidate against the gold summary.
* **lead**: the session's raw turns as the pipeline ingested them (``Speaker: text``, a shared photo's
  caption appended as ``[shares a photo: ...]``), one per line, cut to the node's length in memstream's
  token count (``rank.tokens``: characters / 4), i.e. their first ``tokens x 4`` characters.
* **markup in a header**: a node's first line holds ``[`` or "shares a photo" (a caption marker that
  leaked into the participants or the title).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from memstream.core.recall.rank import CHARS_PER_TOKEN

HELD_SHARE = 0.5
_WORD = re.compile(r"[a-z0-9']+")
_MARKUP = re.compile(r"\[|shares a photo", re.IGNORECASE)


def words(text: str) -> list[str]:
    """The content words of ``text``, in order (see the module docstring)."""
    out = []
    for raw in _WORD.findall(text.lower().replace("\u2019", "'")):
        word = raw.removesuffix("'s").strip("'")
        if word and word not in ENGLISH_STOP_WORDS:
            out.append(word)
    return out


def statement_words(statement: str, speaker: str) -> frozenset[str]:
    """The distinct content words of a gold statement, without those of its speaker's name."""
    return frozenset(words(statement)) - frozenset(words(speaker))


@dataclass(frozen=True)
class Match:
    share: float  # of the statement's words found in the best text
    best: int | None  # index of that text among the texts; None when there is none


def best_match(wanted: frozenset[str], texts: Sequence[frozenset[str]]) -> Match:
    """The text (as its distinct words) holding the largest share of ``wanted``; the first on ties."""
    if not wanted:
        raise ValueError("a statement without content words cannot be held")
    share, best = 0.0, None
    for i, text in enumerate(texts):
        s = len(wanted & text) / len(wanted)
        if s > share:
            share, best = s, i
    return Match(share, best)


def held(match: Match) -> bool:
    return match.share >= HELD_SHARE


def _bigrams(tokens: Sequence[str]) -> Counter[tuple[str, str]]:
    return Counter(pairwise(tokens))


def _overlap(candidate: Counter[Any], reference: Counter[Any]) -> int:
    return sum((candidate & reference).values())


def rouge1_f1(candidate: str, reference: str) -> float:
    c, r = Counter(words(candidate)), Counter(words(reference))
    both = _overlap(c, r)
    if not both:
        return 0.0
    precision, recall = both / c.total(), both / r.total()
    return 2 * precision * recall / (precision + recall)


def rouge2_recall(candidate: str, reference: str) -> float:
    r = _bigrams(words(reference))
    if not r:
        return 0.0
    return _overlap(_bigrams(words(candidate)), r) / r.total()


def lead(turn_lines: Iterable[str], tokens: int) -> str:
    """The session's raw turns (one line each) cut to ``tokens`` of memstream's count."""
    return "\n".join(turn_lines)[: tokens * CHARS_PER_TOKEN]


def has_markup(text: str) -> bool:
    """Whether ``text``'s first line (a node's header) holds caption or bracket markup."""
    return bool(_MARKUP.search(text.split("\n", 1)[0]))


def share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None

"""The scores of ``memstream eval``: pure functions over plain strings and ids (no store, no embedder).

* **text** (evidence recall, text-grounded): the share of evidence turns whose content is in the returned
  texts. A turn is there when at least half of its word trigrams occur among the trigrams of the returned
  texts (each text on its own: no trigram spans two texts); a turn of fewer than 3 words must occur whole,
  its words contiguous, in one returned text. Words are lowercase ``[a-z0-9']+`` tokens.
* **answer**: the share of the gold answer's content words (stop words removed) present among the words
  of the returned context, what the agent reads (dates included), counted only within the budget: the
  context's first ``budget_tokens * 4`` characters. An answer without content words ("No") has no score.
* **id** (evidence recall by provenance): the share of evidence turn ids among the returned items'
  ``source_turn_ids``.

The stop words are recall's (``memstream.core.lexical``, one list in the code base): a change to that list
changes this metric too, so rows of bench/RESULTS.md from before such a change are not comparable. The
budget's characters per token are recall's, the one count the product promises its contexts fit
(``rank.tokens``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

from memstream.core.lexical import STOP_WORDS
from memstream.core.recall.rank import CHARS_PER_TOKEN

TEXT_SHARE = 0.5  # share of an evidence turn's trigrams that must be returned
SHORT_TURN = 3  # turns of fewer words are matched whole (they have no or one trigram)
_WORD = re.compile(r"[a-z0-9']+")

Trigram = tuple[str, str, str]


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def trigrams(tokens: Sequence[str]) -> set[Trigram]:
    return {(tokens[i], tokens[i + 1], tokens[i + 2]) for i in range(len(tokens) - 2)}


def within_budget(context: str, budget_tokens: int) -> str:
    """What the budget admits of a rendered context: its first ``budget_tokens * 4`` characters."""
    return context[: budget_tokens * CHARS_PER_TOKEN]


class Returned:
    """The words and trigrams of the returned texts, computed once for all evidence turns of a question."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.texts = [words(t) for t in texts]
        self.trigrams: set[Trigram] = set().union(*(trigrams(t) for t in self.texts))

    def carries(self, turn: str) -> bool:
        """Whether the returned texts carry the content of ``turn`` (see the module docstring)."""
        want = words(turn)
        if not want:
            return False  # a turn with no words (";)") cannot be told apart from its absence
        if len(want) < SHORT_TURN:
            n = len(want)
            return any(text[i : i + n] == want for text in self.texts for i in range(len(text) - n + 1))
        grams = trigrams(want)
        return len(grams & self.trigrams) >= TEXT_SHARE * len(grams)


def text_recall(evidence_turns: Sequence[str], texts: Iterable[str]) -> float:
    """The share of ``evidence_turns`` (their contents) carried by ``texts``."""
    if not evidence_turns:
        raise ValueError("a question without evidence turns has no text recall")
    returned = Returned(texts)
    return sum(returned.carries(turn) for turn in evidence_turns) / len(evidence_turns)


def content_words(answer: str) -> set[str]:
    return {w for w in words(answer) if w not in STOP_WORDS}


def answer_recall(answer: str, context: str, budget_tokens: int) -> float | None:
    """The share of ``answer``'s content words among the words of the context within the budget;
    None when the answer has no content words."""
    wanted = content_words(answer)
    if not wanted:
        return None
    present = set(words(within_budget(context, budget_tokens)))
    return len(wanted & present) / len(wanted)


def id_recall(evidence_ids: Collection[str], returned_ids: Iterable[str]) -> float:
    """The share of ``evidence_ids`` among ``returned_ids``."""
    if not evidence_ids:
        raise ValueError("a question without evidence has no id recall")
    returned = set(returned_ids)
    return sum(e in returned for e in evidence_ids) / len(evidence_ids)

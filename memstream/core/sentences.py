"""A text cut into sentences: the extractive writer's sentences and recall's sentence views share it.
A pure function, no I/O."""

from __future__ import annotations

import re

_BOUNDARY = re.compile(r"(?<=[.!?…])\s+(?=[^\sa-z])")
# In our own narratives a sentence may start with a lower-case speaker label ("user-7: I ran...").
_LABELLED_BOUNDARY = re.compile(r"(?<=[.!?…])\s+(?=[^\sa-z]|[^\W_][\w'’.@-]*: )")
_ABBREVIATION = re.compile(r"\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|vs|etc|e\.g|i\.e)\.$", re.IGNORECASE)
# A bracketed aside, such as a chat export's "[shares a photo: a dog on a beach]": a caption, not speech.
_BRACKETED = re.compile(r"\s*\[([^\]]*)\]")


def split_sentences(text: str, *, labelled: bool = False) -> list[str]:
    """``text`` cut into sentences at . ! ? followed by a non-lowercase start (or, ``labelled``, a
    ``speaker: `` label); captions dropped."""
    boundary = _LABELLED_BOUNDARY if labelled else _BOUNDARY
    pieces: list[str] = []
    for piece in boundary.split(_BRACKETED.sub("", text).strip()):
        piece = piece.strip()
        if pieces and _ABBREVIATION.search(pieces[-1]):
            pieces[-1] = f"{pieces[-1]} {piece}"  # "Dr. Smith" is one sentence
        elif piece:
            pieces.append(piece)
    return pieces


def bracketed(text: str) -> list[str]:
    """The bracketed asides of ``text`` (what ``split_sentences`` drops), stripped, in order."""
    return [inner.strip() for inner in _BRACKETED.findall(text) if inner.strip()]

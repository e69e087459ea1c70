"""A text cut into sentences, and which of them are small talk: the extractive writer's sentences,
recall's sentence views and recall's rendering of a unit share them. Pure functions, no I/O."""

from __future__ import annotations

import re
from functools import lru_cache

from memstream.core.lexical import tokenize

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


# --- small talk ---------------------------------------------------------------------------------------

MIN_WORDS = 4  # fewer content words than this is small talk ("That's great, Mel!")
WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_POLITE = re.compile(
    r"^\W*(?:thanks|thank\s+you|thx|bye|goodbye|see\s+you|talk\s+(?:to\s+you\s+)?(?:soon|later)|"
    r"take\s+care|congrats|congratulations|good\s+(?:luck|night|morning)|"
    r"(?:so\s+)?(?:good|great|nice|glad|lovely)\s+to\s+(?:see|hear|meet|talk|chat)|glad\s+i\s+could\s+help|"
    r"cheers|have\s+a\s+(?:good|great|nice))\b",
    re.IGNORECASE,
)
_INTERJECTIONS = (
    "hey hi hello wow whoa oh ooh aw aww yeah yes yep yup yay ok okay omg haha lol hmm well sure "
    "absolutely totally definitely cool nice awesome great amazing so"
)
INTERJECTIONS = frozenset(_INTERJECTIONS.split())


def is_i(word: str) -> bool:
    low = word.lower()
    return low == "i" or low.startswith(("i'", "i’"))


def is_trivial(text: str) -> bool:
    """Greetings, thanks and reactions: fewer than MIN_WORDS words once leading interjections and
    the name they address are set aside ("Wow, that's cool, Caroline!")."""
    if _POLITE.match(text):
        return True
    words = WORD.findall(text)
    i = 0
    while i < len(words) and words[i].lower() in INTERJECTIONS:
        i += 1
    for _ in range(2):  # a name after the interjection is a vocative: "Hey Caroline, ..."
        if 0 < i < len(words) and words[i][0].isupper() and not is_i(words[i]):
            i += 1
    return len(words) - i < MIN_WORDS


# Words of thanks and farewell: what a polite sentence says besides a name.
_COURTESY = frozenset(("thanks", "thank", "thx", "bye", "goodbye", "congrats", "congratulations", "cheers"))


def is_small_talk(sentence: str) -> bool:
    """A trivial sentence (``is_trivial``) that names at most one thing (a word of three letters or more
    besides interjections and thanks): "Thanks, Mel!", "That's great, Caroline!", "How's it going?".
    Short answers stay: "Luna and Oliver!" and "Yeah, I play clarinet!" name two."""
    if not is_trivial(sentence):
        return False
    named = [w for w in tokenize(sentence) if len(w) > 2 and w not in INTERJECTIONS and w not in _COURTESY]
    return len(named) <= 1


# Recall condenses a few hundred candidate units a call, mostly the same ones for one user's questions:
# cached, a warm recall pays a lookup per unit instead of ~30 us of regular expressions (docs/recall.md).
@lru_cache(maxsize=16_384)
def without_small_talk(content: str) -> str:
    """``content`` (what one speaker said) without its small-talk sentences (``is_small_talk``): "Hey
    Mel! Thanks! I ran a marathon last week." -> "I ran a marathon last week." Its bracketed asides (a
    photo's caption) stay, at the end; ``content`` itself when every sentence is small talk or none is."""
    said = split_sentences(content)
    kept = [s for s in said if not is_small_talk(s)]
    if not kept or len(kept) == len(said):
        return content
    return " ".join([*kept, *(f"[{aside}]" for aside in bracketed(content))])

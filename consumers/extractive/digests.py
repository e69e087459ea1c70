"""Digests: session, day and week nodes that say who did what, in the third person, per speaker.

A node is written from the turns below it (not from its children's summaries, which would compress
twice and lose what happened): every informative sentence (``observations.informative_sentences``),
shortened, told in the third person, deduplicated, and per speaker the most specific ones that fit a
budget of content words, put back in time order. One line per speaker, under a dated header:

    Session on 8 May 2023 (Caroline, Melanie):
    Caroline went to an LGBTQ support group yesterday (7 May 2023). Caroline is keen on counseling.
    Melanie painted a lake sunrise last year (2022).

A week names each line's day ("On 8 May 2023, Caroline went ..."). Shortening (``compressed``) drops
what says nothing about anyone: leading fillers and vocatives ("Wow, Mel, ..."), intensifiers, and a
trailing verdict on what was just said (", and it was so powerful"); a sentence about the listener or
a reaction to them ("You're so brave", "That sounds amazing") is not the speaker's news and is left out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from consumers.extractive.observations import content_words, informative_sentences, third_person_text
from consumers.extractive.sentences import Sentence, provenance
from consumers.writer import Scope, Source, Written
from memstream.core.dates import render_date
from schemas.memory import MemoryKind

# Content words (besides names) a node keeps per speaker (a week: per speaker and day). Shorter nodes
# are more precise, longer ones keep more of what happened: on the LoCoMo dev split ROUGE-1 F1 fell
# from 35.6 at 50 words to 34.7 at 80 while ROUGE-2 recall rose from 13.6 to 15.5; 70 is where both
# held. A day (more than one session: one is passed through) has more to say, a week less per day.
SPEAKER_WORDS = {MemoryKind.SESSION: 70, MemoryKind.DAY: 120, MemoryKind.WEEK: 60}
DUPLICATE = 0.7  # Jaccard of content words above which a sentence repeats one already kept

_FILLER = (
    r"hey|hi|hello|wow|whoa|oh|ah|aw+|yeah|yes|yep|yup|no|nope|ok|okay|well|so|haha|lol|omg|gosh|hmm|"
    r"woah|right|sure|totally|absolutely|definitely|exactly|true|cool|great|awesome|nice|thanks|thank you"
)
# One or more fillers, each maybe with a name after it, each closed by punctuation: "Wow, Mel! "
_LEADING = re.compile(
    rf"^(?:(?:{_FILLER})[,!.…—–-]*\s*(?:(?-i:[A-Z][\w'’-]*)\s*)?[,!.…—–-]+\s*)+", re.IGNORECASE
)
_INTENSIFIER = re.compile(r"\b(?:really|super|totally|truly|very|just|pretty|quite|actually)\s+", re.I)
_VERDICT = (
    r"(?:it|that|this)(?:'s|’s|\s+(?:was|is|has\s+been|felt|feels|looks|looked|sounds|sounded|seems|"
    r"seemed))\b"
)
# A closing clause that only judges what came before: ", and it was so powerful!", "which is exciting".
_TRAILING_VERDICT = re.compile(
    rf"(?:\s*(?:[,;—–]|\s-)\s*(?:(?:and|but|so)\s+)?|\s+(?:and|but|so)\s+){_VERDICT}[^,;—–]*$"
    r"|,\s*which\s+(?:is|was)\b[^,;—–]*$",
    re.IGNORECASE,
)
# A statement that drops its "I" before a present participle: "Researching adoption agencies." It has
# no verb of its own after it (else the participle is its subject: "Taking care of it is important").
_PARTICIPLE = re.compile(
    r"^(?:going\s+to|gonna|[a-z]+ing)\b(?!.*\b(?:is|are|was|were|has|have|had|'s|’s|can|could|will|would|"
    r"should|might|must|does|do|did|looks|seems|sounds|feels|makes|made|helps|gives|means|keeps)\b)",
    re.IGNORECASE,
)
# About the listener ("You're so brave") or a reaction ("That sounds amazing", "Sounds like a good fit"):
# not the speaker's news.
_TO_LISTENER = re.compile(
    rf"^[\"'“‘(]*(?:you|your|you're|you’re|you've|you'll|you'd|sounds|looks|seems|{_VERDICT})\b", re.I
)


def compressed(text: str) -> str:
    """``text`` (a first-person sentence as said) without leading fillers and vocatives, intensifiers,
    and a trailing verdict clause; what is left of it when that still names something."""
    short = _LEADING.sub("", text)
    short = _INTENSIFIER.sub("", short)
    cut = _TRAILING_VERDICT.sub("", short)
    short = cut if len(content_words(cut)) >= 3 else short
    short = short.strip()
    if _PARTICIPLE.match(short):
        short = f"I'm {short[:1].lower()}{short[1:]}"
    return short[:1].upper() + short[1:] if short else text


def to_listener(text: str) -> bool:
    """Whether ``text`` is about the listener or a reaction to them, not the speaker's own news."""
    return bool(_TO_LISTENER.match(_LEADING.sub("", text)))


@dataclass(frozen=True)
class Told:
    """One sentence as a node tells it."""

    said: Sentence  # as said, for its speaker, time and turns
    text: str  # compressed, in the third person
    words: frozenset[str]  # its content words, the speakers' names left out

    @property
    def day(self) -> str:
        return self.said.ts.date().isoformat()


def told(scope: Scope, units: Sequence[Source]) -> list[Told]:
    """Every informative sentence of ``units`` the speaker says about themselves or the world,
    shortened and in the third person, in time order."""
    said = informative_sentences(scope, units)
    names = frozenset(w.lower() for name in said.speakers for w in name.split())
    out: list[Told] = []
    for s in said.pool:
        assert s.speaker is not None  # informative sentences are attributed
        if to_listener(s.anchored):
            continue
        text = third_person_text(compressed(s.anchored), s.speaker, said.addressee(s.speaker))
        words = frozenset(content_words(text)) - names
        if len(words) >= 3:
            out.append(Told(s, _terminated(text), words))
    return out


def _terminated(text: str) -> str:
    """``text`` ending its sentence, so a node's text splits back into the sentences it tells."""
    body = text.rstrip(" ,;:—–-")
    return body if body.endswith((".", "!", "…")) else f"{body}."


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def chosen(pool: Sequence[Told], words: int) -> list[Told]:
    """Of one speaker's sentences, the most specific (most content words; earlier first on ties) that
    fit ``words`` content words, none repeating one kept, in time order."""
    kept: list[Told] = []
    room = words
    for t in sorted(pool, key=lambda t: (-len(t.words), t.said.order)):
        if len(t.words) > room or any(_jaccard(t.words, k.words) >= DUPLICATE for k in kept):
            continue
        kept.append(t)
        room -= len(t.words)
    return sorted(kept, key=lambda t: t.said.order)


def _header(kind: MemoryKind, start: datetime, names: Sequence[str], scope: Scope) -> str:
    """ "Session on 8 May 2023 (Caroline, Melanie):"; a day's and a week's name no one, as when they carry
    their one child's text (``summaries.retitled``)."""
    day = render_date(start, scope.zone)
    if kind is MemoryKind.SESSION:
        return f"Session on {day} ({', '.join(names)}):" if names else f"Session on {day}:"
    return f"Day {day}:" if kind is MemoryKind.DAY else f"Week of {day}:"


def digest(scope: Scope, kind: MemoryKind, start: datetime, units: Sequence[Source]) -> Written:
    """The node of ``kind`` starting at ``start`` over ``units`` (the turns below it): a dated header
    (a session's naming who spoke), then one line per speaker (a week: per day and speaker) of what
    they said."""
    pool = told(scope, units)
    speakers = list(dict.fromkeys(sp for u in units for sp in u.speakers)) or list(
        dict.fromkeys(t.said.speaker for t in pool if t.said.speaker)
    )
    per_day = kind is MemoryKind.WEEK
    groups: dict[tuple[str, str], list[Told]] = {}
    for t in pool:
        groups.setdefault((t.day if per_day else "", t.said.speaker or ""), []).append(t)
    budget = SPEAKER_WORDS.get(kind, SPEAKER_WORDS[MemoryKind.DAY])
    lines: list[list[Told]] = [chosen(g, budget) for g in groups.values()]
    lines = sorted((line for line in lines if line), key=lambda line: line[0].said.order)
    header = _header(kind, start, speakers, scope)
    quoted: list[Sentence] = []
    text_lines = [header]
    for line in lines:
        dated = f"On {render_date(line[0].said.ts, scope.zone)}, " if per_day else ""
        texts = [t.text for t in line]
        texts[0] = f"{dated}{_lowered(texts[0]) if dated else texts[0]}"
        text_lines.append(" ".join(texts))
        quoted += [
            replace(t.said, text=x, anchored=x, speaker=None) for t, x in zip(line, texts, strict=True)
        ]
    return provenance("\n".join(text_lines), quoted, scope.zone)


def _lowered(text: str) -> str:
    """``text`` as it reads after "On <day>, ": an opening function word ("Since", "The") lowercased, a
    name or any other word not."""
    first, _, rest = text.partition(" ")
    low = first.lower()
    return f"{low} {rest}".rstrip() if low in ENGLISH_STOP_WORDS and low != "i" else text

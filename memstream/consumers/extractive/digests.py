"""Digests: session, day and week nodes that say who did what, in the third person, per speaker.

A node is written from the turns below it (not from its children's summaries, which would compress
twice and lose what happened): every informative sentence (``observations.informative_sentences``),
shortened, told in the third person, deduplicated, and per speaker the ones a summary wants most (the
speaker's own news, dated events, the session's recurring phrases; ``told``) that fit a budget of
content words, put back in time order. One line per speaker, under a dated header:

    Session on 8 May 2023 (Caroline, Melanie):
    Caroline went to an LGBTQ support group on 7 May. Caroline is keen on counseling.
    Melanie painted a lake sunrise in 2022.

A week names each line's day ("On 8 May 2023, Caroline went ..."). Shortening (``compressed``) drops
what says nothing about anyone: leading fillers and vocatives ("Wow, Mel, ..."), intensifiers, and a
trailing verdict on what was just said (", and it was so powerful"); a sentence about the listener or
a reaction to them ("You're so brave", "That sounds amazing") is not the speaker's news and is left out.
As a summary is written: a relative time said as its date (``in_words``), a person named once a sentence
and "they" after (``third_person_text(pronouns=True)``), contractions written out (``written_out``).
Level-1 observations are written apart (``observations.observations``) and keep their own wording.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import pairwise
from zoneinfo import ZoneInfo

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from memstream.consumers.extractive.observations import (
    content_word_list,
    content_words,
    informative_sentences,
    third_person_text,
)
from memstream.consumers.extractive.sentences import Sentence, explicit, mentions, provenance
from memstream.consumers.writer import Scope, Source, Written
from memstream.core.dates import render_date, render_interval
from memstream.schemas.events import EventTime
from memstream.schemas.memory import MemoryKind

# Content words (besides names) a day keeps per speaker, and a week per speaker and day: a day (more
# than one session: one is passed through) has more to say, a week less per day.
SPEAKER_WORDS = {MemoryKind.DAY: 120, MemoryKind.WEEK: 60}
# A session keeps this share of each speaker's informative content words, within SESSION_WORDS: a short
# session's node is short. On the LoCoMo dev split (38 sessions, scored as `memstream eval consolidation`
# does) a fixed 70 words a speaker gave ROUGE-1 F1 36.9 against a lead of the same length of 28.2 (ROUGE-2
# recall 15.8); 0.9 within 20-60 gives 38.0 against 27.5 (15.3); 0.8 gave 38.1 against 27.2 (15.0); 1.0
# gave 37.3 against 28.2 (15.6).
SESSION_SHARE = 0.9
SESSION_WORDS = (20, 60)
# Which sentences a node keeps first: the most content words, weighted up for what a summary tells
# (on dev, without these the same budgets gave ROUGE-1 F1 36.8 and ROUGE-2 recall 14.3, with them 38.0
# and 15.3): the speaker's own news (said in the first person: "I went", "my sister", "we moved"), a
# dated event, and phrases the session repeats (a pair of adjacent content words that two or more turns
# say: "support group", "dance studio"), by the share of the sentence's pairs that are.
OWN_BONUS = 1.0
DATED_BONUS = 1.0
REPEATED_BONUS = 3.0
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


# Contractions written out, as a summary does ("they're" -> "they are"); "'s" (is, has or a possessive)
# stays as said.
_CONTRACTIONS = (
    (re.compile(r"\bcan't\b", re.I), "cannot"),
    (re.compile(r"\bwon't\b", re.I), "will not"),
    (re.compile(r"\bshan't\b", re.I), "shall not"),
    (re.compile(r"n't\b", re.I), " not"),
    (re.compile(r"'re\b", re.I), " are"),
    (re.compile(r"'ve\b", re.I), " have"),
    (re.compile(r"'ll\b", re.I), " will"),
    (re.compile(r"'d(?=\s+(?:been|gone|done|seen|had|got|never|already|just|\w+ed)\b)", re.I), " had"),
    (re.compile(r"'d\b", re.I), " would"),
    (re.compile(r"\bI'm\b", re.I), "I am"),
    (re.compile(r"(?<!\w)'em\b", re.I), "them"),
    (re.compile(r"(?<!\w)'cause\b", re.I), "because"),
)


def written_out(text: str) -> str:
    """``text`` with its contractions written out: "They're sure" -> "They are sure"."""
    out = text.replace("\u2019", "'")
    for contraction, full in _CONTRACTIONS:
        out = contraction.sub(full, out)
    return out


# A label render_interval writes, what kind of time it names, and the preposition it takes.
_WHEN = (
    (re.compile(r"\d{1,2} [A-Z][a-z]+ \d{4}"), "on"),  # a day
    (re.compile(r"the weekend of [^()]+ \d{4}"), "on"),
    (re.compile(r"the week of [^()]+ \d{4}"), "in"),
    (re.compile(r"(?:[A-Z][a-z]+|spring|summer|autumn) \d{4}"), "in"),  # a month or a season
    (re.compile(r"\d{4}"), "in"),  # a year
)
_PREPOSITION = re.compile(
    r"\b(?:in|on|at|since|from|until|till|by|before|after|during|for|of|to|like|about|around|over|through)"
    r"\s+$",
    re.IGNORECASE,
)
_POSSESSIVE = re.compile(r"['’]s\b")  # after a time expression: "last month's"


def _date_words(event: EventTime, said: datetime, zone: ZoneInfo) -> tuple[str, str] | None:
    """The date ``event`` names, without ``said``'s year (the node's header gives it), and its
    preposition: ("on", "7 May"), ("in", "June"), ("in", "2022"); None for a vaguer span ("12 June –
    2 July 2023"), which keeps its expression and label."""
    label = render_interval(event, zone)
    for pattern, preposition in _WHEN:
        if pattern.fullmatch(label):
            short = label.removesuffix(f" {said.year}")
            return preposition, short or label
    return None


def in_words(text: str, events: Sequence[EventTime], said: datetime, zone: ZoneInfo) -> str:
    """``text`` with each relative time expression said as the date it names: "I went yesterday" ->
    "I went on 7 May", "Last week I ..." -> "in the week of 1 May I ..." (said in ``said``'s year;
    another year is named). A summary is read long after it was said: the date is what lasts, and
    the expression next to it ("yesterday (7 May 2023)") says it twice. A vaguer one, or a possessive
    ("last month's"), keeps its expression, anchored as everywhere ("a few weeks ago (10–30 April 2023)")."""
    spans: list[tuple[int, int, str]] = []
    for event in events:
        label = render_interval(event, zone)
        if explicit(event.expression, label):
            continue
        words = _date_words(event, said, zone)
        for m in mentions(text, event.expression):
            if words is None or _POSSESSIVE.match(text, m.end()):  # "last month's": no "in" fits
                spans.append((m.start(), m.end(), f"{m[0]} ({label})"))
                continue
            preposition, date = words
            before = text[: m.start()]
            spans.append(
                (m.start(), m.end(), date if _PREPOSITION.search(before) else f"{preposition} {date}")
            )
    out: list[str] = []
    pos = 0
    for start, end, said_as in sorted(spans, key=lambda s: (s[0], -s[1])):
        if start < pos:
            continue  # inside an expression already said as its date
        out += [text[pos:start], said_as]
        pos = end
    return "".join(out) + text[pos:]


def unaddressed(text: str, speakers: Iterable[str]) -> str:
    """``text`` without a speaker's name said to address them ("..., Jon!", "Jon, ..."): who was
    spoken to is not news, and a summary names them where it matters."""
    names = "|".join(re.escape(n) for n in sorted(set(speakers), key=len, reverse=True))
    if not names:
        return text
    out = re.sub(rf"^(?:{names})\s*[,!]\s*", "", text)
    return re.sub(rf"\s*,\s*(?:{names})\s*(?=[,.!?…]|$)", "", out)


def to_listener(text: str) -> bool:
    """Whether ``text`` is about the listener or a reaction to them, not the speaker's own news."""
    return bool(_TO_LISTENER.match(_LEADING.sub("", text)))


@dataclass(frozen=True)
class Told:
    """One sentence as a node tells it."""

    said: Sentence  # as said, for its speaker, time and turns
    text: str  # compressed, in the third person
    words: frozenset[str]  # its content words, the speakers' names left out
    weight: float = 1.0  # how much a summary wants it, per content word (see OWN_BONUS)

    @property
    def day(self) -> str:
        return self.said.ts.date().isoformat()


_OWN = re.compile(r"^(?:I|I'm|I've|I'll|I'd|my|we|we're|we've|our)\b", re.IGNORECASE)


def _pairs(text: str, names: frozenset[str]) -> set[tuple[str, str]]:
    """The adjacent pairs of ``text``'s content words (stop words and names left out)."""
    return set(pairwise(w for w in content_word_list(text) if w not in names))


def told(scope: Scope, units: Sequence[Source]) -> list[Told]:
    """Every informative sentence of ``units`` the speaker says about themselves or the world,
    shortened and in the third person, in time order, weighted for how much a summary wants it."""
    said = informative_sentences(scope, units)
    names = frozenset(w.lower() for name in said.speakers for w in name.split())
    turns_saying: Counter[tuple[str, str]] = Counter()
    for unit in units:
        turns_saying.update(_pairs(unit.text, names))
    out: list[Told] = []
    for s in said.pool:
        assert s.speaker is not None  # informative sentences are attributed
        if to_listener(s.anchored):
            continue
        plain = compressed(unaddressed(in_words(s.text, s.events, s.ts, scope.zone), said.speakers))
        text = written_out(third_person_text(plain, s.speaker, said.addressee(s.speaker), pronouns=True))
        text = text[:1].upper() + text[1:]  # "Can't wait" -> "Cannot wait"
        words = frozenset(content_words(text)) - names
        if len(words) >= 3:
            pairs = _pairs(plain, names)
            repeated = sum(turns_saying[p] >= 2 for p in pairs) / len(pairs) if pairs else 0.0
            own = OWN_BONUS if _OWN.match(plain.replace("\u2019", "'")) else 0.0
            weight = (1.0 + own + (DATED_BONUS if s.events else 0.0)) * (1.0 + REPEATED_BONUS * repeated)
            out.append(Told(s, _terminated(text), words, round(weight, 9)))
    return out


def _terminated(text: str) -> str:
    """``text`` ending its sentence, so a node's text splits back into the sentences it tells."""
    body = text.rstrip(" ,;:—–-")
    return body if body.endswith((".", "!", "…")) else f"{body}."


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def chosen(pool: Sequence[Told], words: int) -> list[Told]:
    """Of one speaker's sentences, the most wanted (content words times weight; earlier first on ties)
    that fit ``words`` content words, none repeating one kept, in time order."""
    kept: list[Told] = []
    room = words
    for t in sorted(pool, key=lambda t: (-len(t.words) * t.weight, t.said.order)):
        if len(t.words) > room or any(_jaccard(t.words, k.words) >= DUPLICATE for k in kept):
            continue
        kept.append(t)
        room -= len(t.words)
    return sorted(kept, key=lambda t: t.said.order)


def budget(kind: MemoryKind, pool: Sequence[Told]) -> int:
    """The content words a node of ``kind`` keeps of one speaker's ``pool`` (a week's: of one day's)."""
    if kind is MemoryKind.SESSION:
        low, high = SESSION_WORDS
        return max(low, min(high, round(SESSION_SHARE * sum(len(t.words) for t in pool))))
    return SPEAKER_WORDS.get(kind, SPEAKER_WORDS[MemoryKind.DAY])


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
    lines: list[list[Told]] = [chosen(g, budget(kind, g)) for g in groups.values()]
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

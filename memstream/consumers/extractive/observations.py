"""Observations: a session's informative sentences as dated, third-person, self-contained statements.

Every informative sentence a speaker says (no question, no small talk) becomes part of an observation of
its turn, with the first person rewritten to the speaker's name and, between exactly two speakers, the
second person to the other one; the consolidator dates it by its turn (``Memory.start``):

    Nate: Hey Joanna! I got my turtles a new tank yesterday, they love it! How are you?
    ->  Nate got their turtles a new tank yesterday (2 June 2022), they love it.

One observation per turn, whose provenance is that turn. A chat session is mostly informative, and every
"I" becomes a name, so all of it would cost more than the raw turns: a budget (a share of the session's
raw tokens) keeps the most specific sentences, ranked by the IDF (over the session's turns) of their
content words. Rules come from English grammar and two-party chat; pronouns are rewritten by rule (no
parser, no coreference): "they", "it" and who "we" are stay as said.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from memstream.consumers.extractive.centrality import is_phatic
from memstream.consumers.extractive.sentences import (
    INTERJECTIONS,
    WORD,
    Sentence,
    is_question,
    sentences,
    word_set,
)
from memstream.consumers.writer import Scope, Source
from memstream.core.recall.rank import tokens

MIN_CONTENT = 3  # content words besides the speakers' names, for a sentence to say something
_ASIDE = re.compile(r"\s*\[[^\]]*\]")  # "[shares a photo: ...]": a caption, not something said


@dataclass(frozen=True)
class ObservationDraft:
    """What one speaker said in one turn, in the third person: "Nate has pet turtles." (said at ``said``)."""

    text: str
    speaker: str
    said: datetime  # the turn's dialogue time
    source_ids: tuple[str, ...]  # the unit it was said in
    turn_ids: tuple[str, ...]

    @property
    def key(self) -> str:
        """The same thing said again by the same speaker: its lowercase words."""
        return f"{self.speaker.lower()}|{' '.join(w.lower() for w in WORD.findall(self.text))}"


# --- first and second person -> names --------------------------------------------------------------------

# The form a word after "I" takes after a name: auxiliaries and contractions by table, a present-tense
# verb gets its -s, anything else (past tense, adverb, participle) stays.
_AFTER_I = {
    "am": "is", "'m": "is", "have": "has", "'ve": "has", "do": "does", "don't": "doesn't",
    "'ll": "will", "'d": "would", "haven't": "hasn't", "was": "was",
}  # fmt: skip
_PAST = word_set(
    "went ran saw made got took came gave found told felt left kept thought bought brought began wrote "
    "read met heard knew became won lost spent sent built taught caught chose drew drove ate fell flew "
    "forgot grew held hung hid led lent meant paid put quit rode rang rose sang sat slept spoke stood "
    "swam threw understood woke wore said sold shot shut had did tried started finished visited joined "
    "adopted moved decided learned learnt dreamt burnt"
)
_UNCHANGED = _PAST | word_set(
    "will would can could should might must didn't can't won't wasn't couldn't wouldn't shouldn't just "
    "also really still always never recently finally actually even only already usually cut set hit let hurt"
)
# Rewritten before "I" is: "I wanna" -> "I want to" -> "Jo wants to".
_INFORMAL = {"wanna": "want to", "gonna": "going to", "gotta": "have to"}


def third_person(verb: str) -> str:
    """The form ``verb`` takes after a name instead of "I": "love" -> "loves", "am" -> "is"."""
    low = verb.lower()
    if low in _AFTER_I:
        return _AFTER_I[low]
    if low in _UNCHANGED or not low.isalpha() or low.endswith(("ed", "ing", "ly")):
        return verb
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return f"{verb}es"
    if len(low) > 1 and low.endswith("y") and low[-2] not in "aeiou":
        return f"{verb[:-1]}ies"
    return f"{verb}s"


def _subject_i(m: re.Match[str], name: str) -> str:
    nxt = (m[1] or "").strip()  # "I" ends the sentence: "Sam and I"
    return f"{name} {third_person(nxt)}" if nxt else name


def _possessive(text: str, m: re.Match[str], speaker: str) -> str:
    """ "my" as "Name's" where the name is not yet said before it, "their" after (no gender guessed)."""
    return "their" if speaker in text[: m.start()] else f"{speaker}'s"


_SUBJECTLESS = re.compile(r"^(?:(?:just|finally|also|recently|actually)\s+)?([a-z]+)\b", re.IGNORECASE)


def _with_subject(text: str, speaker: str) -> str:
    """A statement that opens on a past-tense verb has dropped its "I": "Lost my job" -> "Jo lost my job"."""
    m = _SUBJECTLESS.match(text)
    if m is None or m[1].lower() not in _PAST:
        return text
    return f"{speaker} {text[:1].lower()}{text[1:]}"


# "they" for the speaker takes the verb "I" took, but for these: "I am" -> "they are".
_AFTER_THEY = {"am": "are", "'m": "'re", "was": "were"}
# What "you" follows when it is a subject ("..., you did", "glad you came"), not an object ("told you").
_SUBJECT_BEFORE = re.compile(
    r"(?:^|[,;:.!?—–-]|\b(?:and|but|or|so|that|if|when|because|as|how|what|where|why|while|since|like|"
    r"until|unless|though|although|hope|think|know|bet|guess|wish|glad|sure|proud|happy))\s*$",
    re.IGNORECASE,
)
Form = Callable[[re.Match[str]], str]


def _always(text: str) -> Form:
    return lambda _: text


def _they(verb: str) -> str:
    """ "they" and the form ``verb`` (after "I") takes after it: "'m" -> "they're", "was" -> "they were"."""
    form = _AFTER_THEY.get(verb.lower(), verb)
    return f"they{form}" if form.startswith("'") else f"they {form}".rstrip()


# A reference to the speaker, and to the addressee, that a later pass rewrites.
_FIRST_PERSON = re.compile(r"\b(?:I|me|my|mine|myself|we|us|our|ours|ourselves)\b(?!\.\w)", re.IGNORECASE)
_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself)\b", re.IGNORECASE)


def _person(
    s: str, pattern: str, person: str, named: Form, pronoun: Form | None, refs: re.Pattern[str]
) -> str:
    """Each match of ``pattern`` in ``s`` as ``named``; with a ``pronoun`` form, as that when ``person``
    is named before it: by name, or by another reference (``refs``) that a pass names."""
    seen = False

    def one(m: re.Match[str]) -> str:
        nonlocal seen
        before = s[: m.start()]
        later = pronoun is not None and (seen or person in before or refs.search(before) is not None)
        seen = True
        return pronoun(m) if later and pronoun is not None else named(m)

    return re.sub(pattern, one, s, flags=re.IGNORECASE)


def third_person_text(text: str, speaker: str, other: str | None, pronouns: bool = False) -> str:
    """``text`` said by ``speaker`` with I/me/my/mine/myself/we/us/our as names (who "we" are is not
    guessed: "Name and others"; "my" and "our" are "their" after the name), and you/your as ``other``
    when there is one addressee. With ``pronouns``, as a summary tells it: a person named once a
    sentence, then "they", "them", "their" ("Jo said they would help Mel move their piano")."""
    s = _with_subject(text.replace("\u2019", "'"), speaker)
    for informal, formal in _INFORMAL.items():
        s = re.sub(rf"\b{informal}\b", formal, s, flags=re.IGNORECASE)

    def person(s: str, pattern: str, who: str, named: Form, pronoun: Form) -> str:
        refs = _FIRST_PERSON if who == speaker else _SECOND_PERSON
        return _person(s, pattern, who, named, pronoun if pronouns else None, refs)

    # "I", or chat's "i" (not "i.e."), and the word after it
    s = person(
        s,
        r"\bI('m|'ve|'ll|'d)\b",
        speaker,
        lambda m: f"{speaker} {third_person(m[1])}",
        lambda m: _they(m[1]),
    )
    s = person(
        s,
        r"\bI\b(?!\.\w)(\s+[A-Za-z']+)?",
        speaker,
        lambda m: _subject_i(m, speaker),
        lambda m: _they((m[1] or "").strip()),
    )
    # "our flat" is the speaker's too: possessives as "my" ("Tomas and others' flat" reads badly)
    if pronouns:
        s = person(s, r"\b(?:my|mine|our|ours)\b", speaker, lambda _: f"{speaker}'s", lambda _: "their")
        s = person(s, r"\bmyself\b", speaker, lambda _: speaker, lambda _: "themselves")
        s = person(s, r"\bme\b(?!-)", speaker, lambda _: speaker, lambda _: "them")  # not "me-time"
    else:  # as observations are written: "their" and "themselves" once the name is said before
        s = re.sub(r"\b(?:my|mine|our|ours)\b", lambda m: _possessive(s, m, speaker), s, flags=re.IGNORECASE)
        s = re.sub(
            r"\bmyself\b", lambda m: "themselves" if speaker in s[: m.start()] else speaker, s, flags=re.I
        )
        s = re.sub(r"\bme\b", speaker, s, flags=re.IGNORECASE)
    we_forms = (("we're", " are"), ("we've", " have"), ("we'll", " will"), ("we'd", " would"), ("we", ""))
    for we, verb in (*we_forms, ("us|ourselves", "")):
        they = ("they" if we.startswith("we") else "them") + verb
        s = person(s, rf"\b(?:{we})\b", speaker, _always(f"{speaker} and others{verb}"), _always(they))
    if other is not None:
        for you, named, they in (
            ("your|yours", f"{other}'s", "their"),
            ("you're", f"{other} is", "they are"),
            ("you've", f"{other} has", "they have"),
            ("you'd", f"{other} would", "they would"),
            ("you'll", f"{other} will", "they will"),
            ("yourself", other, "themselves"),
        ):
            s = person(s, rf"\b(?:{you})\b", other, _always(named), _always(they))
        s = person(
            s,
            r"\byou\b",
            other,
            lambda _: other,
            lambda m: "they" if _SUBJECT_BEFORE.search(s[: m.start()]) else "them",
        )
    return s[:1].upper() + s[1:]


# --- what to keep --------------------------------------------------------------------------------------


def content_word_list(text: str) -> list[str]:
    """The lowercase words of ``text`` that are not English stop words, three letters or more, in order."""
    return [w for w in (w.lower() for w in WORD.findall(text)) if w not in ENGLISH_STOP_WORDS and len(w) > 2]


def content_words(text: str) -> set[str]:
    """Distinct :func:`content_word_list` of ``text``."""
    return set(content_word_list(text))


def informative(s: Sentence, names: frozenset[str]) -> bool:
    """A statement that names something: not a question, not small talk (``centrality.is_phatic``), and
    MIN_CONTENT content words besides the speakers' names ("That is really great Jon" names nothing)."""
    if s.speaker is None or is_question(s.text) or is_phatic(s.text):
        return False
    return len(content_words(s.text) - names - INTERJECTIONS) >= MIN_CONTENT


def _idf(units: Sequence[Source]) -> dict[str, float]:
    """Smoothed IDF of each content word over the turns: what few turns say is specific."""
    df: dict[str, int] = {}
    for unit in units:
        for word in content_words(unit.text):
            df[word] = df.get(word, 0) + 1
    n = len(units)
    return {w: math.log((1 + n) / (1 + d)) + 1 for w, d in df.items()}


def _budgeted(pool: Sequence[Sentence], units: Sequence[Source], budget: float) -> list[Sentence]:
    """The most specific sentences of ``pool`` (sum of their content words' IDF) that fit ``budget`` times
    the units' raw tokens, in time order. Ties go to the earlier sentence, so the choice is deterministic."""
    idf = _idf(units)
    room = budget * sum(tokens(u.text) for u in units)
    ranked = sorted(
        pool, key=lambda s: (-round(sum(idf.get(w, 1.0) for w in content_words(s.text)), 9), s.order)
    )
    kept: list[Sentence] = []
    for s in ranked:
        size = tokens(s.anchored)
        if size <= room:
            kept.append(s)
            room -= size
    return sorted(kept, key=lambda s: s.order)


def _addressee(speakers: Sequence[str], speaker: str) -> str | None:
    others = [s for s in dict.fromkeys(speakers) if s != speaker]
    return others[0] if len(set(speakers)) == 2 and len(others) == 1 else None


@dataclass(frozen=True)
class Said:
    """The informative sentences of some units, and who spoke in them (in order, with repeats)."""

    pool: list[Sentence]
    speakers: list[str]

    def addressee(self, speaker: str) -> str | None:
        """Whom ``speaker`` speaks to: the other speaker when exactly two spoke, else no one."""
        return _addressee(self.speakers, speaker)


def informative_sentences(scope: Scope, units: Sequence[Source]) -> Said:
    """Every informative sentence of ``units`` (captions left out), in time order: what observations
    are chosen from, and what session, day and week nodes quote in the third person."""
    said = [_strip_aside(s) for s in sentences(units, scope.zone)]
    speakers = [s.speaker for s in said if s.speaker]
    names = frozenset(w.lower() for name in speakers for w in WORD.findall(name))
    return Said([s for s in said if s.text and informative(s, names)], speakers)


def observations(scope: Scope, units: Sequence[Source], budget: float) -> list[ObservationDraft]:
    """The observations of one session's ``units`` (in time order), one per turn that keeps a sentence
    within ``budget`` (a share of the session's raw tokens; 1 or more: every informative sentence)."""
    said = informative_sentences(scope, units)
    kept = _budgeted(said.pool, units, budget)
    by_turn: dict[tuple[str, str | None], list[Sentence]] = {}
    for s in kept:
        by_turn.setdefault((s.source_id, s.speaker), []).append(s)
    out: list[ObservationDraft] = []
    for group in by_turn.values():
        first = group[0]
        assert first.speaker is not None  # informative() keeps attributed sentences only
        other = said.addressee(first.speaker)
        body = " ".join(third_person_text(s.anchored, first.speaker, other) for s in group)
        text = f"{body.rstrip(' .!;,')}."
        out.append(ObservationDraft(text, first.speaker, first.ts, (first.source_id,), first.turn_ids))
    return out


def _strip_aside(s: Sentence) -> Sentence:
    return replace(s, text=_ASIDE.sub("", s.text).strip(), anchored=_ASIDE.sub("", s.anchored).strip())

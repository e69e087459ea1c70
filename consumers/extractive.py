"""The extractive writer: deterministic, offline, zero tokens (the default consolidator).

Every output is built from the sources' own sentences, picked by TF-IDF centrality and put back
in time order; the only words added are dates, speaker labels and short headers. A sentence from a
unit is *date-anchored*: it is prefixed with its dialogue date and each time expression in it is
followed by what it resolves to, so no bare "yesterday" survives:

    On 8 May 2023, Caroline: I went to a LGBTQ support group yesterday (7 May 2023).

Memory sources (children that are sessions or days, a previous profile, facts) are already written
this way: their sentences are parsed back into date, speaker and text, never re-anchored.

Provenance is exact: every sentence knows the turns it quotes (a unit's sentence its turn; a
memory's sentence the turns its ``sentence_turn_ids`` give it), and every output names the turns
of the sentences it quotes, whole and per sentence (``_provenance``), never the rest of its sources.

The module is a functional core -- plain data in, plain data out, the same inputs give the same
text -- with ``ExtractiveWriter`` a thin async shell implementing ``consumers.writer.Writer``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import numpy as np
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfVectorizer

from consumers.writer import EpisodeDraft, FactDraft, Scope, Source, Written
from memstream.semantic_time import extract_event_times
from schemas.events import EventTime, Granularity
from schemas.memory import FactType, Memory, MemoryKind, Triple

__all__ = [
    "WRITER_NAME",
    "Claim",
    "ExtractiveWriter",
    "Sentence",
    "anchor",
    "centrality",
    "classify",
    "durative",
    "episodes",
    "facts",
    "is_question",
    "is_trivial",
    "narrate",
    "profile",
    "rank",
    "render",
    "render_date",
    "render_interval",
    "sentences",
    "split_sentences",
    "summary",
]

WRITER_NAME = "extractive@2"  # 2: provenance names the quoted turns only

# --- tunables -----------------------------------------------------------------------------------------
MIN_WORDS = 4  # fewer content words than this is small talk ("That's great, Mel!")
EPISODE_GAP = timedelta(days=7)  # units further apart than this belong to different episodes
MAX_EPISODES = 3
EPISODE_SENTENCES = 6
EPISODE_WORDS = 120
MERGED_MAX_CHARS = 1_500  # a merged episode stops growing here (its newest least central sentences go)
MAX_FACTS = 12
OBJECT_WORDS = 12  # a triple's object is a short phrase, not the rest of the sentence
SUMMARY_SENTENCES = {MemoryKind.SESSION: 5, MemoryKind.DAY: 5, MemoryKind.WEEK: 6}
DEFAULT_SUMMARY_SENTENCES = 5
PROFILE_LINES = 10
TOPIC_SENTENCES = 3
PERSONA_SENTENCES = 5
# Centrality is weighted up for sentences that say something about the speaker or name a time:
# without it, chat reactions ("Wow, what an amazing family pic!") win on shared vocabulary alone.
CLAIM_BONUS = 1.0
DATED_BONUS = 0.25
# Speakers whose first-person statements are not facts about a person ("I can help with that").
NOT_SUBJECTS = frozenset({"assistant", "ai", "bot", "system"})

_MONTH_NAMES = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_SEASON_NAMES = {3: "spring", 6: "summer", 9: "autumn", 12: "winter"}


def _words(spaced: str) -> frozenset[str]:
    return frozenset(spaced.split())


_TRAITS = frozenset({FactType.PREFERENCE, FactType.ENTITY_RELATION, FactType.TIME_UPDATE})


# --- sentences ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sentence:
    """One sentence of a source, with who said it and when."""

    text: str  # as said (from a memory: as written there, dates already resolved)
    anchored: str  # ``text`` with each time expression followed by its resolved date
    speaker: str | None
    ts: datetime  # when it was said, in the scope's zone
    dated: bool  # ``ts`` is a known dialogue date, rendered as "On 8 May 2023, "
    source_id: str
    source: int  # index of its source in time order
    position: int  # index within its source
    events: tuple[EventTime, ...] = ()  # the resolved time expressions it contains
    turn_ids: tuple[str, ...] = ()  # the turns it quotes

    @property
    def order(self) -> tuple[datetime, int, int]:
        return (self.ts, self.source, self.position)


_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_BOUNDARY = re.compile(r"(?<=[.!?…])\s+(?=[^\sa-z])")
# In our own narratives a sentence may start with a lower-case speaker label ("user-7: I ran...").
_LABELLED_BOUNDARY = re.compile(r"(?<=[.!?…])\s+(?=[^\sa-z]|[^\W_][\w'’.@-]*: )")
_ABBREVIATION = re.compile(r"\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|vs|etc|e\.g|i\.e)\.$", re.IGNORECASE)
_BRACKETED = re.compile(r"\s*\[[^\]]*\]")  # LoCoMo's "[shares a photo: ...]": a caption, not speech
_UTTERANCE = re.compile(r"^(?P<speaker>[^:\n]{1,128}?): (?P<content>.*)$")
# Our own headers ("Day 8 May 2023:", "Topic in May 2023: ..."), and any short line ending in a colon.
_HEADER = re.compile(
    r"^(?:(?:Session on|Day|Week of|Profile as of|Topic in|Persona in)\b[^:\n]*:\s*|[^:\n]{0,80}:\s*$)"
)
_RENDERED = re.compile(
    r"^(?:On (?P<day>\d{1,2} [A-Z][a-z]+ \d{4}), )?"
    r"(?P<speaker>[^\W_][\w'’.@-]*(?: [A-Z][\w'’.@-]*){0,3}): (?P<body>.+)$",
    re.DOTALL,
)
_ANNOTATION = re.compile(r"\s\([^()]*\)")
_POLITE = re.compile(
    r"^\W*(?:thanks|thank\s+you|thx|bye|goodbye|see\s+you|talk\s+(?:to\s+you\s+)?(?:soon|later)|"
    r"take\s+care|congrats|congratulations|good\s+(?:luck|night|morning)|"
    r"(?:so\s+)?(?:good|great|nice|glad|lovely)\s+to\s+(?:see|hear|meet|talk|chat)|glad\s+i\s+could\s+help|"
    r"cheers|have\s+a\s+(?:good|great|nice))\b",
    re.IGNORECASE,
)
_INTERJECTIONS = _words(
    "hey hi hello wow whoa oh ooh aw aww yeah yes yep yup yay ok okay omg haha lol hmm well sure "
    "absolutely totally definitely cool nice awesome great amazing so"
)


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


def is_question(text: str) -> bool:
    return text.rstrip(" \"')]”’").endswith("?")


def is_trivial(text: str) -> bool:
    """Greetings, thanks and reactions: fewer than MIN_WORDS words once leading interjections and
    the name they address are set aside ("Wow, that's cool, Caroline!")."""
    if _POLITE.match(text):
        return True
    words = _WORD.findall(text)
    i = 0
    while i < len(words) and words[i].lower() in _INTERJECTIONS:
        i += 1
    for _ in range(2):  # a name after the interjection is a vocative: "Hey Caroline, ..."
        if 0 < i < len(words) and words[i][0].isupper() and not _is_i(words[i]):
            i += 1
    return len(words) - i < MIN_WORDS


def _is_i(word: str) -> bool:
    low = word.lower()
    return low == "i" or low.startswith(("i'", "i’"))


def _utterances(text: str) -> list[tuple[str | None, str]]:
    """A unit's ``speaker: content`` lines; a line without a speaker continues the previous one."""
    out: list[tuple[str | None, str]] = []
    for line in text.splitlines():
        m = _UTTERANCE.match(line)
        if m:
            out.append((m["speaker"].strip(), m["content"]))
        elif line.strip():
            speaker = out[-1][0] if out else None
            out.append((speaker, line))
    return out


def _mentions(text: str, expression: str) -> list[re.Match[str]]:
    pattern = r"\s+".join(re.escape(part) for part in expression.split())
    return list(re.finditer(rf"(?<!\w){pattern}(?!\w)", text, re.IGNORECASE))


def _events_in(text: str, known: Sequence[EventTime], said: datetime) -> tuple[EventTime, ...]:
    """The unit's event times whose expression is in this sentence, then any other expression the
    extractor finds in the sentence alone (a unit reports an interval only once)."""
    found = [e for e in known if _mentions(text, e.expression)]
    seen = {e.expression.lower() for e in found}
    found += [e for e in extract_event_times(text, said) if e.expression.lower() not in seen]
    return tuple(found)


def _unit_sentences(source: Source, index: int, zone: ZoneInfo) -> list[Sentence]:
    said = source.ts.astimezone(zone)
    out: list[Sentence] = []
    for speaker, content in _utterances(source.text):
        for piece in split_sentences(content):
            events = _events_in(piece, source.event_times, said)
            out.append(
                Sentence(
                    text=piece,
                    anchored=anchor(piece, events, zone),
                    speaker=speaker,
                    ts=said,
                    dated=True,
                    source_id=source.id,
                    source=index,
                    position=len(out),
                    events=events,
                    turn_ids=source.turn_ids,
                )
            )
    return out


def _memory_sentences(source: Source, index: int, zone: ZoneInfo) -> list[Sentence]:
    """A memory's sentences; "On <date>, <Speaker>: " prefixes are read back, a date carrying on to
    the sentences after it (narratives name the date only when it changes)."""
    day: date | None = None
    out: list[Sentence] = []
    for line in source.text.splitlines():
        line = _HEADER.sub("", line.strip(), count=1) if _is_header(line) else line.strip()
        for piece in split_sentences(line, labelled=True):
            speaker, body = None, piece
            m = _RENDERED.match(piece)
            if m:
                day = (_parse_day(m["day"]) or day) if m["day"] else day
                speaker, body = m["speaker"], m["body"]
            ts = datetime.combine(day, time(), zone) if day else source.ts.astimezone(zone)
            out.append(Sentence(body, body, speaker, ts, day is not None, source.id, index, len(out)))
    return _attributed(out, source)


def _attributed(parsed: list[Sentence], source: Source) -> list[Sentence]:
    """Each of a memory's sentences with the turns it quotes: from the memory's sentence map when it
    matches the parse (written by this module), else every turn the memory's text carries."""
    per = source.sentence_turn_ids
    if len(per) != len(parsed):
        per = (source.turn_ids,) * len(parsed)
    return [replace(s, turn_ids=turns) for s, turns in zip(parsed, per, strict=True)]


def _provenance(text: str, quoted: Sequence[Sentence], zone: ZoneInfo) -> Written:
    """``text`` with the turns it carries, whole and per sentence as ``_memory_sentences`` will read
    it back: a sentence takes the turns of the quoted sentence it renders; one the parse cuts
    differently (rare) takes the turns of every quoted sentence."""
    if not quoted:
        return Written(text, ())
    carried = tuple(dict.fromkeys(t for s in quoted for t in s.turn_ids))
    turns_of: dict[tuple[str, str], tuple[str, ...]] = {}
    for s in quoted:
        turns_of[_key(s)] = tuple(dict.fromkeys((*turns_of.get(_key(s), ()), *s.turn_ids)))
    written = _memory_sentences(Source(id="", ts=quoted[0].ts, text=text, turn_ids=()), 0, zone)
    return Written(text, carried, tuple(turns_of.get(_key(s), carried) for s in written))


def _is_header(line: str) -> bool:
    m = _HEADER.match(line.strip())
    return m is not None and not _RENDERED.match(line.strip())


def sentences(sources: Iterable[Source], zone: ZoneInfo) -> list[Sentence]:
    """All sentences of ``sources`` in time order. Sources are sorted by (time, id) and repeated ids
    dropped first, so the result does not depend on the order they were given in. A source with an
    interval (``start``) is a memory, otherwise a unit."""
    out: list[Sentence] = []
    for index, source in enumerate(_canonical(sources)):
        read = _unit_sentences if source.start is None else _memory_sentences
        out.extend(read(source, index, zone))
    return out


def _canonical(sources: Iterable[Source]) -> list[Source]:
    """Sources in (time, id) order, each id once: the input order never matters."""
    unique: dict[str, Source] = {}
    for s in sorted(sources, key=lambda s: (s.ts, s.id, s.text)):
        unique.setdefault(s.id, s)
    return list(unique.values())


def _plain(text: str) -> str:
    return _ANNOTATION.sub("", text)


def _key(s: Sentence) -> tuple[str, str]:
    """Identity of a statement: who said it and its words, ignoring case, punctuation and dates."""
    words = " ".join(w.lower() for w in _WORD.findall(_plain(s.text)))
    return ((s.speaker or "").lower(), words)


# --- dates --------------------------------------------------------------------------------------------


def _day(d: date) -> str:
    return f"{d.day} {_MONTH_NAMES[d.month - 1]} {d.year}"


def _month(d: date) -> str:
    return f"{_MONTH_NAMES[d.month - 1]} {d.year}"


def _parse_day(label: str) -> date | None:
    day, month, year = label.split()
    try:
        return date(int(year), _MONTH_NAMES.index(month) + 1, int(day))
    except ValueError:
        return None


def render_date(moment: datetime, zone: ZoneInfo) -> str:
    """``8 May 2023``: the day of ``moment`` in ``zone``."""
    return _day(moment.astimezone(zone).date())


def _calendar_day(bound: datetime, zone: ZoneInfo) -> date:
    """The day an interval bound means. Bounds are local midnights of the speaker's calendar, so
    they are read in their own offset; any other bound is read in ``zone``."""
    if bound.utcoffset() is not None and bound.timetz().replace(tzinfo=None) == time():
        return bound.date()
    return bound.astimezone(zone).date()


def _days(first: date, last: date) -> str:
    if first == last:
        return _day(first)
    if (first.year, first.month) == (last.year, last.month):
        return f"{first.day}–{last.day} {_MONTH_NAMES[last.month - 1]} {last.year}"
    if first.year == last.year:
        return f"{first.day} {_MONTH_NAMES[first.month - 1]} – {_day(last)}"
    return f"{_day(first)} – {_day(last)}"


def _month_end(d: date) -> date:
    following = date(d.year + d.month // 12, d.month % 12 + 1, 1)
    return following - timedelta(days=1)


def render_interval(event: EventTime, zone: ZoneInfo) -> str:
    """A readable name for an event time: "7 May 2023", "the week of 1 May 2023", "the weekend of
    6–7 May 2023", "May 2023", "summer 2023", "2022", else the range of days it covers."""
    first = _calendar_day(event.start, zone)
    last = _calendar_day(event.end, zone) - timedelta(days=1)
    g = event.granularity
    if g is Granularity.MOMENT or last < first:
        return _day(event.start.astimezone(zone).date())
    whole_months = first.day == 1 and last == _month_end(last)
    if g is Granularity.YEAR and whole_months and (first.month, last.month) == (1, 12):
        return str(first.year) if first.year == last.year else f"{first.year}–{last.year}"
    if g is Granularity.SEASON and whole_months and first.month in _SEASON_NAMES:
        name = _SEASON_NAMES[first.month]
        return f"winter {first.year}–{first.year + 1}" if name == "winter" else f"{name} {first.year}"
    if g is Granularity.MONTH and whole_months:
        if (first.year, first.month) == (last.year, last.month):
            return _month(first)
        if first.year == last.year:
            return f"{_MONTH_NAMES[first.month - 1]}–{_month(last)}"
        return f"{_month(first)} – {_month(last)}"
    if g is Granularity.WEEK and first.weekday() == 0 and (last - first).days == 6:
        return f"the week of {_day(first)}"
    if g is Granularity.WEEKEND:
        return f"the weekend of {_days(first, last)}"
    return _days(first, last)


def _explicit(expression: str, label: str) -> bool:
    """The expression already says what the label would ("in 2022", "May 8, 2023")."""
    said = {w.lower() for w in _WORD.findall(expression)}
    named = {w.lower() for w in _WORD.findall(label)} - {"the", "week", "weekend", "of"}
    return named <= said


def anchor(text: str, events: Sequence[EventTime], zone: ZoneInfo) -> str:
    """``text`` with each occurrence of an event's expression followed by its resolved date in
    parentheses: "yesterday" -> "yesterday (7 May 2023)". Idempotent."""
    spans: list[tuple[int, int, str]] = []
    for event in events:
        label = render_interval(event, zone)
        if not _explicit(event.expression, label):
            spans += [(m.start(), m.end(), label) for m in _mentions(text, event.expression)]
    out: list[str] = []
    pos = 0
    for start, end, label in sorted(spans, key=lambda s: (s[0], -s[1])):
        note = f" ({label})"
        if start < pos or text.startswith(note, end):
            continue  # inside an expression already anchored, or anchored before
        out += [text[pos:end], note]
        pos = end
    return "".join(out) + text[pos:]


# --- rendering ----------------------------------------------------------------------------------------


def _terminated(text: str) -> str:
    # Each rendered sentence ends its sentence, so a narrative splits back into the same sentences.
    return text if re.search(r"[.!?…][\"')\]”’]*$", text) else f"{text}."


def render(s: Sentence, zone: ZoneInfo, *, with_day: bool = True) -> str:
    """One standalone sentence, e.g. ``On 8 May 2023, Caroline: I went ... yesterday (7 May 2023).``"""
    day = f"On {render_date(s.ts, zone)}, " if with_day and s.dated else ""
    speaker = f"{s.speaker}: " if s.speaker else ""
    return f"{day}{speaker}{_terminated(s.anchored)}"


def narrate(chosen: Sequence[Sentence], zone: ZoneInfo) -> str:
    """The sentences as one paragraph, naming the date only when it changes."""
    out: list[str] = []
    previous: str | None = None
    for s in chosen:
        day = render_date(s.ts, zone) if s.dated else None
        out.append(render(s, zone, with_day=day is not None and day != previous))
        previous = day or previous
    return " ".join(out)


# --- centrality ---------------------------------------------------------------------------------------


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
    claim = _has_subject(s) and classify(_plain(s.text)) is not None
    return 1.0 + (CLAIM_BONUS if claim else 0.0) + (DATED_BONUS if s.events else 0.0)


def rank(pool: Sequence[Sentence]) -> list[Sentence]:
    """Most central first (centrality times the sentence's weight); ties by time, then position."""
    central = centrality([_plain(s.text) for s in pool])
    scores = [round(c * _weight(s), 9) for c, s in zip(central, pool, strict=True)]
    return [s for _, s in sorted(zip(scores, pool, strict=True), key=lambda p: (-p[0], p[1].order))]


def _informative(pool: Sequence[Sentence]) -> list[Sentence]:
    """The best non-empty tier of ``pool``: statements, else questions, else small talk."""
    substantial = [s for s in pool if not is_trivial(s.text)]
    statements = [s for s in substantial if not is_question(s.text)]
    return statements or substantial or list(pool)


def _select(
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
        key = _key(s)
        size = len(_WORD.findall(s.text))
        if key in seen or (chosen and max_words is not None and words + size > max_words):
            continue
        seen.add(key)
        chosen.append(s)
        words += size
    return chosen


def _in_time_order(chosen: Iterable[Sentence]) -> list[Sentence]:
    return sorted(chosen, key=lambda s: s.order)


# --- episodes -----------------------------------------------------------------------------------------


def _time_groups(units: Sequence[Source]) -> list[list[Source]]:
    """Units split at gaps longer than EPISODE_GAP: at the MAX_EPISODES - 1 largest of them."""
    gaps = [(units[i + 1].ts - units[i].ts, i) for i in range(len(units) - 1)]
    largest = sorted((g for g in gaps if g[0] > EPISODE_GAP), key=lambda g: (-g[0], g[1]))
    cuts = sorted(i for _, i in largest[: MAX_EPISODES - 1])
    groups: list[list[Source]] = []
    begin = 0
    for i in cuts:
        groups.append(list(units[begin : i + 1]))
        begin = i + 1
    groups.append(list(units[begin:]))
    return groups


def _span(units: Sequence[Source], zone: ZoneInfo) -> tuple[datetime, datetime]:
    """From the earliest dialogue time or event start to the latest dialogue time or event end."""
    starts = [u.ts for u in units] + [e.start for u in units for e in u.event_times]
    ends = [u.ts for u in units] + [e.end for u in units for e in u.event_times]
    return min(starts).astimezone(zone), max(ends).astimezone(zone)


def _episode(group: Sequence[Source], zone: ZoneInfo) -> EpisodeDraft | None:
    pool = sentences(group, zone)
    if not pool:
        return None
    chosen = _in_time_order(_select(rank(_informative(pool)), EPISODE_SENTENCES, EPISODE_WORDS))
    start, end = _span(group, zone)
    written = _provenance(narrate(chosen, zone), chosen, zone)
    return EpisodeDraft(
        text=written.text,
        start=start,
        end=end,
        source_ids=_quoted_units(chosen),
        covers_ids=tuple(u.id for u in group),
        sentence_turn_ids=written.sentence_turn_ids,
    )


def _quoted_units(chosen: Iterable[Sentence]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s.source_id for s in chosen))


def _merge(units: Sequence[Source], existing: Source, zone: ZoneInfo) -> EpisodeDraft:
    """``existing`` followed by the units' most central sentences it does not already hold, as many
    as fit in MERGED_MAX_CHARS (at least one, so the new units are always represented)."""
    kept = _memory_sentences(existing, 0, zone)
    said = frozenset(_key(s) for s in kept)
    base = existing.text.rstrip()
    chosen: list[Sentence] = []
    for s in _select(rank(_informative(sentences(units, zone))), EPISODE_SENTENCES, skip=said):
        trial = _in_time_order([*chosen, s])
        if chosen and len(base) + 1 + len(narrate(trial, zone)) > MERGED_MAX_CHARS:
            continue
        chosen = trial
    text = f"{base} {narrate(chosen, zone)}" if chosen else base
    start, end = _span(units, zone)
    before = existing.start or existing.ts
    after = max(t for t in (existing.end, existing.start, existing.ts) if t is not None)
    return EpisodeDraft(
        text=text,
        start=min(start, before.astimezone(zone)),
        end=max(end, after.astimezone(zone)),
        source_ids=_quoted_units(chosen),
        covers_ids=tuple(u.id for u in units),
        sentence_turn_ids=_provenance(text, [*kept, *chosen], zone).sentence_turn_ids,
    )


def episodes(scope: Scope, units: Sequence[Source], merge_into: Source | None) -> list[EpisodeDraft]:
    """1-3 episodes of ``units`` (split at long gaps in dialogue time), each its most central
    sentences in time order; with ``merge_into``, exactly one: that episode extended."""
    ordered = _canonical(units)
    if not ordered:
        return []
    if merge_into is not None:
        return [_merge(ordered, merge_into, scope.zone)]
    drafts = (_episode(group, scope.zone) for group in _time_groups(ordered))
    return [d for d in drafts if d is not None]


# --- facts --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """What a first-person sentence says about its speaker."""

    fact_type: FactType
    predicate: str
    object: str


@dataclass(frozen=True)
class _Rule:
    fact_type: FactType
    pattern: re.Pattern[str]
    build: Callable[[re.Match[str]], tuple[str, str] | None]  # -> (predicate, raw object) or None


def _collapse(text: str) -> str:
    return " ".join(text.lower().replace("’", "'").split())


_IRREGULAR_PAST = _words(
    "been went gone ran took taken made saw seen met got gotten gave given had found bought read "
    "wrote written did done won lost built drove driven flew flown ate eaten began begun left kept "
    "brought taught caught sold sent spent came became chose chosen drew drawn grew grown held knew "
    "known led paid rode sang sung sat slept spoke spoken stood swam threw thrown wore worn woke hung "
    "shot fell fallen fought hid hidden put set cut hit let quit shut forgot forgotten broke broken "
    "stole tore dug fed lent lit sought shook spun stuck swept wept"
)
# Verbs that say nothing about the speaker ("I think", "I guess"), auxiliaries, negations.
_NOT_ACTIONS = _words(
    "am are was were is be do does did don't didn't doesn't can can't could couldn't should shouldn't "
    "would wouldn't will won't might must may shall think thought feel felt guess know knew mean "
    "meant agree agreed wonder bet believe appreciate understand see hope wish suppose say said not "
    "never to the a an so just really totally also last haven't hadn't wasn't weren't isn't aren't"
)
_NOT_PROGRESSIVE = _words("feeling doing thinking wondering kidding saying hoping loving being")
_PARTICLE = r"to|at|in|on|with|for|from|into|about|up|out|off|by|over|through|around|back"
_FIRST = r"\b(?:i|we)"
_BE = r"(?:'m|'re|\s+am|\s+are)"
_ADV = (
    r"(?:\s+(?:just|recently|finally|also|really|actually|totally|absolutely|still|already|even|"
    r"definitely|truly|now|kinda|always|usually|often|currently|seriously|both|all))*"
)
_REST = r"\s+(?P<obj>.+)"
_RELATIVES = (
    r"(?:friend|sister|brother|sibling|mom|mother|dad|father|parent|husband|wife|partner|spouse|boyfriend|"
    r"girlfriend|fianc[ée]e?|son|daughter|kid|child|children|baby|grandma|grandmother|grandpa|grandfather|"
    r"aunt|uncle|cousin|niece|nephew|dog|cat|puppy|kitten|pet|boss|coworker|colleague|roommate|"
    r"neighbou?r|mentor|therapist)s?"
)
_NAME = r"(?-i:[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)"

_PLANS = {
    "going to": "plans to", "gonna": "plans to", "planning to": "plans to", "planning on": "plans to",
    "thinking about": "plans to", "thinking of": "plans to", "about to": "plans to", "aiming to": "plans to",
    "'ll": "plans to", "will": "plans to", "plan to": "plans to", "intend to": "plans to",
    "aim to": "plans to", "hoping to": "hopes to", "hope to": "hopes to",
    "looking forward to": "looks forward to", "excited to": "looks forward to",
    "can't wait to": "looks forward to", "trying to": "is trying to", "off to": "is off to",
    "want to": "wants to", "wanna": "wants to", "'d like to": "wants to", "would like to": "wants to",
    "'d love to": "wants to", "would love to": "wants to", "need to": "needs to",
}  # fmt: skip
_LIKES = {
    "love": "loves", "like": "likes", "enjoy": "enjoys", "prefer": "prefers", "hate": "hates",
    "dislike": "dislikes", "adore": "adores", "can't stand": "can't stand", "cannot stand": "can't stand",
    "don't like": "dislikes", "do not like": "dislikes", "don't mind": "doesn't mind",
}  # fmt: skip
# Single-valued slots: a TIME_UPDATE with one of these predicates supersedes the current facts of
# the same slot. Other predicates never supersede: one can start, join or love many things at once.
_FAMILIES = {
    "lives in": "residence", "lives at": "residence", "moved to": "residence", "moved into": "residence",
    "moved back to": "residence", "relocated to": "residence",
    "works at": "work", "works for": "work", "works as": "work", "started working at": "work",
}  # fmt: skip


def _third_person(verb: str) -> str:
    irregular = {"have": "has", "do": "does", "go": "goes", "be": "is"}
    if verb in irregular:
        return irregular[verb]
    if verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        return f"{verb}es"
    if verb.endswith("y") and len(verb) > 1 and verb[-2] not in "aeiou":
        return f"{verb[:-1]}ies"
    return f"{verb}s"


def _is_past(verb: str) -> bool:
    return verb.endswith("ed") or verb in _IRREGULAR_PAST


def _plan(m: re.Match[str]) -> tuple[str, str]:
    verb = _collapse(m["verb"])
    if verb == "going to" and re.match(r"(?:the|a|an|my|our|his|her|their)\b", m["obj"], re.I):
        return "is going to", m["obj"]  # a place, not a plan to do something
    return _PLANS[verb], m["obj"]


def _like(m: re.Match[str]) -> tuple[str, str]:
    return _LIKES[_collapse(m["verb"])], m["obj"]


def _state(m: re.Match[str]) -> tuple[str, str]:
    verb = re.sub(r"\b(?:big|huge) ", "", _collapse(m["verb"]))
    return f"is {verb}", m["obj"]


def _favourite(m: re.Match[str]) -> tuple[str, str]:
    return f"favourite {_collapse(m['noun'])} is", m["obj"]


def _relation(m: re.Match[str]) -> tuple[str, str] | None:
    if m["obj"].lower() in ENGLISH_STOP_WORDS:
        return None
    return f"has {_collapse(m['verb'])}", m["obj"]


def _has(m: re.Match[str]) -> tuple[str, str]:
    return "has", m["obj"]


def _place(obj: str) -> str:
    # Where one lives, works or moved to ends before what comes with it: "Boston for a new job".
    return re.split(r"\s(?:with|for|because|after|before|since)\s", obj, maxsplit=1, flags=re.I)[0]


def _moved(m: re.Match[str]) -> tuple[str, str]:
    verb = _collapse(m["verb"])
    return verb, (_place(m["obj"]) if verb.startswith(("moved", "relocated")) else m["obj"])


def _present(m: re.Match[str]) -> tuple[str, str]:
    verb, *rest = _collapse(m["verb"]).split()
    return " ".join([verb if _is_past(verb) else _third_person(verb), *rest]), _place(m["obj"])


def _identity(m: re.Match[str]) -> tuple[str, str] | None:
    verb = _collapse(m["verb"])
    if verb == "from":
        return "is from", m["obj"]
    if _WORD.findall(m["obj"].lower())[:1] in (["bit"], ["little"], ["lot"]):
        return None  # "I'm a bit tired": a mood, not an identity
    return "is", f"{m['verb']} {m['obj']}"


def _progressive(m: re.Match[str]) -> tuple[str, str] | None:
    verb = _collapse(m["verb"])
    if verb in _NOT_PROGRESSIVE:
        return None
    particle = f" {_collapse(m['prt'])}" if m["prt"] else ""
    return f"is {verb}{particle}", m["obj"]


def _action(m: re.Match[str]) -> tuple[str, str] | None:
    verb = _collapse(m["verb"])
    if verb in _NOT_ACTIONS:
        return None
    particle = f" {_collapse(m['prt'])}" if m["prt"] else ""
    perfect = _collapse(m["perf"] or "").lstrip("'")
    if perfect:
        aux = "had" if perfect == "had" else "has"
        if _is_past(verb):
            return f"{aux} {verb}{particle}", m["obj"]
        return aux, f"{m['verb']}{particle} {m['obj']}"  # "I have two kids": have is the verb
    return (verb if _is_past(verb) else _third_person(verb)) + particle, m["obj"]


def _relative(m: re.Match[str]) -> tuple[str, str]:
    return "has", _collapse(m["verb"])


def _rule(
    fact_type: FactType, pattern: str, build: Callable[[re.Match[str]], tuple[str, str] | None]
) -> _Rule:
    return _Rule(fact_type, re.compile(pattern, re.IGNORECASE), build)


# In priority order: the first rule that yields a claim wins.
_RULES = (
    # a state that changed at a time
    _rule(
        FactType.TIME_UPDATE,
        rf"{_FIRST}(?:'ve|\s+have)?{_ADV}\s+(?P<verb>moved(?:\s+back)?(?:\s+(?:to|into|from|in\s+with))?|"
        r"relocated\s+to|started|quit|joined|changed|switched\s+to|left|stopped|retired(?:\s+from)?|"
        rf"graduated(?:\s+from)?|got\s+a\s+new)\b{_REST}",
        _moved,
    ),
    # preferences and constraints
    _rule(
        FactType.PREFERENCE,
        rf"{_FIRST}{_ADV}\s+(?P<verb>love|like|enjoy|prefer|hate|dislike|adore|can't\s+stand|"
        rf"cannot\s+stand|don't\s+like|do\s+not\s+like|don't\s+mind)\b{_REST}",
        _like,
    ),
    _rule(
        FactType.PREFERENCE,
        rf"{_FIRST}{_BE}{_ADV}\s+(?P<verb>allergic\s+to|into|(?:a\s+)?(?:big\s+|huge\s+)?fan\s+of|"
        r"keen\s+on|passionate\s+about|obsessed\s+with|crazy\s+about|afraid\s+of|scared\s+of|"
        rf"not\s+a\s+fan\s+of|not\s+into)\b{_REST}",
        _state,
    ),
    _rule(
        FactType.PREFERENCE,
        r"\bmy\s+(?:all-time\s+)?fav(?:ou?rite|e)?\s+(?P<noun>[\w-]+(?:\s+[\w-]+)?)\s+"
        rf"(?:is|are|was|has\s+to\s+be|would\s+be){_REST}",
        _favourite,
    ),
    # plans
    _rule(
        FactType.USER_EVENT,
        rf"{_FIRST}{_BE}{_ADV}\s+(?P<verb>going\s+to|gonna|planning\s+(?:to|on)|thinking\s+(?:about|of)|"
        r"hoping\s+to|about\s+to|looking\s+forward\s+to|excited\s+to|aiming\s+to|trying\s+to|off\s+to)\b"
        + _REST,
        _plan,
    ),
    _rule(
        FactType.USER_EVENT,
        rf"{_FIRST}(?P<verb>'ll|\s+will|\s+plan\s+to|\s+intend\s+to|\s+want\s+to|\s+wanna|\s+hope\s+to|"
        r"'d\s+like\s+to|\s+would\s+like\s+to|'d\s+love\s+to|\s+would\s+love\s+to|\s+need\s+to|\s+aim\s+to|"
        rf"\s+can't\s+wait\s+to)\b{_ADV}{_REST}",
        _plan,
    ),
    _rule(
        FactType.USER_EVENT,
        rf"^(?P<verb>gonna|going\s+to|planning\s+to|hoping\s+to|can't\s+wait\s+to)\b{_REST}",
        _plan,
    ),
    # people and pets, by name
    _rule(
        FactType.ENTITY_RELATION,
        rf"\bmy\s+(?P<verb>(?:(?:best|close|old|little|big|older|younger)\s+)?{_RELATIVES}),?\s+"
        rf"(?:named\s+)?(?P<obj>{_NAME})\b",
        _relation,
    ),
    _rule(
        FactType.ENTITY_RELATION,
        rf"{_FIRST}(?:'ve|\s+have)(?:\s+got)?\s+(?:an?|one|two|three|\d+)\s+(?P<verb>{_RELATIVES})\s+"
        rf"(?:named|called)\s+(?P<obj>{_NAME})\b",
        _relation,
    ),
    _rule(
        FactType.ENTITY_RELATION,
        rf"{_FIRST}(?:'ve|\s+have)(?:\s+got)?\s+(?P<obj>(?:an?|one|two|three|four|five|\d+)\s+{_RELATIVES})\b",
        _has,
    ),
    # who the speaker is, where they live and work
    _rule(
        FactType.ENTITY_RELATION,
        rf"{_FIRST}{_ADV}\s+(?P<verb>live\s+(?:in|at|with|near)|work\s+(?:at|as|for|in|with)|"
        rf"study\s+(?:at|in)|grew\s+up\s+in|come\s+from|volunteer\s+(?:at|with|for))\b{_REST}",
        _present,
    ),
    _rule(FactType.ENTITY_RELATION, rf"{_FIRST}{_BE}{_ADV}\s+(?P<verb>an?|from)\s+(?P<obj>.+)", _identity),
    # anything else the speaker does or did
    _rule(
        FactType.USER_EVENT,
        rf"{_FIRST}{_BE}{_ADV}\s+(?P<verb>[a-z]+ing)(?:\s+(?P<prt>{_PARTICLE}))?\b{_REST}",
        _progressive,
    ),
    _rule(
        FactType.USER_EVENT,
        rf"{_FIRST}(?P<perf>'ve|\s+have|\s+had)?{_ADV}\s+(?P<verb>[a-z]+(?:'t)?)"
        rf"(?:\s+(?P<prt>{_PARTICLE}))?\b{_REST}",
        _action,
    ),
    # people and pets, unnamed: "my husband and kids"
    _rule(FactType.ENTITY_RELATION, rf"\bmy\s+(?P<verb>{_RELATIVES})\b", _relative),
)
_STARTS = re.compile(r"\b(?:i|we|my)\b", re.IGNORECASE)
_CLAUSE_END = re.compile(
    r"[,;:!?()\[\]\"“”]|\.(?!\d)|\s[-–—]|[-–—]\s|\s(?:but|because|'cause|cause|which|who|since|although|though|"
    r"while|when|whereas|until|unless)\s|\s(?:and|so|but|then)\s+(?:i|it|we|they|he|she|you|that|this|there|"
    r"my|[a-z]+ed)\b",
    re.IGNORECASE,
)
_LOOSE_ENDS = _words(
    "and or with to for of at in on the a an my our so too as really very just from by about"
)


def _object(raw: str, expressions: Sequence[str]) -> str:
    """The object phrase: up to the end of its clause, without time expressions, at most OBJECT_WORDS
    words, loose function words trimmed; "" when nothing but function words is left."""
    cut = _CLAUSE_END.search(raw)
    phrase = raw[: cut.start()] if cut else raw
    for expression in sorted(expressions, key=len, reverse=True):
        for m in reversed(_mentions(phrase, expression)):
            phrase = phrase[: m.start()] + phrase[m.end() :]
    words = phrase.split()[:OBJECT_WORDS]
    while words and words[-1].lower() in _LOOSE_ENDS:
        words.pop()
    if not words or words[0].lower() in {"and", "or", "so", "then"}:
        return ""  # the verb had no object: "we bond and understand each other"
    if all(w.lower().strip("'’") in ENGLISH_STOP_WORDS for w in words):
        return ""
    return " ".join(words)


def classify(text: str, expressions: Sequence[str] = ()) -> Claim | None:
    """The claim a first-person sentence makes about its speaker (None for anything else), with
    ``expressions`` (its time expressions) left out of the object."""
    if is_question(text):
        return None
    said = text.replace("’", "'")
    starts = [0, *(m.start() for m in _STARTS.finditer(said))]
    for rule in _RULES:
        for pos in starts:
            m = rule.pattern.match(said, pos)
            built = rule.build(m) if m else None
            if built is None:
                continue
            predicate, raw = built
            obj = _object(raw, expressions)
            if obj:
                fact_type = rule.fact_type
                if fact_type is FactType.ENTITY_RELATION and re.search(r"\bnow\b", said, re.I):
                    fact_type = FactType.TIME_UPDATE  # "now I live in Boston"
                return Claim(fact_type, predicate, obj)
    return None


def _has_subject(s: Sentence) -> bool:
    return s.speaker is not None and s.speaker.lower() not in NOT_SUBJECTS


def _is_trait(s: Sentence) -> bool:
    """A preference or identity statement (who the speaker is, likes, lives with...)."""
    if not _has_subject(s) or is_trivial(s.text):
        return False
    claim = classify(_plain(s.text))
    return claim is not None and claim.fact_type in _TRAITS


def _slot(triple: Triple) -> tuple[str, str] | None:
    family = _FAMILIES.get(_collapse(triple.predicate))
    return (_collapse(triple.subject), family) if family else None


def _superseded(triple: Triple, related: Sequence[Memory]) -> tuple[str, ...]:
    """Current related facts in the same single-valued slot (subject and predicate family) with
    another object: "moved to Boston" supersedes "lives in New York"."""
    slot = _slot(triple)
    if slot is None:
        return ()
    ids = [
        m.memory_id
        for m in related
        if m.expired_at is None
        and m.triple is not None
        and _slot(m.triple) == slot
        and _collapse(m.triple.object) != _collapse(triple.object)
    ]
    return tuple(dict.fromkeys(ids))


def _fact(s: Sentence, claim: Claim, zone: ZoneInfo, related: Sequence[Memory]) -> FactDraft:
    assert s.speaker is not None
    event = s.events[0] if s.events else None
    triple = Triple(subject=s.speaker, predicate=claim.predicate, object=claim.object)
    bounded_past = event is not None and claim.fact_type is FactType.USER_EVENT and event.end <= s.ts
    return FactDraft(
        sentence=render(s, zone),
        triple=triple,
        fact_type=claim.fact_type,
        valid_from=(event.start if event else s.ts).astimezone(zone),
        valid_to=event.end.astimezone(zone) if event is not None and bounded_past else None,
        source_ids=(s.source_id,),
        supersedes=_superseded(triple, related) if claim.fact_type is FactType.TIME_UPDATE else (),
    )


def facts(
    scope: Scope, episode: EpisodeDraft, units: Sequence[Source], related: Sequence[Memory]
) -> list[FactDraft]:
    """First-person statements of the episode's units as time-scoped triples, most central first,
    at most MAX_FACTS; none equivalent to a ``related`` fact or to one another."""
    covered = set(episode.covers_ids)
    mine = [u for u in units if u.id in covered] or list(units)
    pool = [s for s in sentences(mine, scope.zone) if _has_subject(s) and not is_trivial(s.text)]
    seen = {m.triple.normalized() for m in related if m.triple is not None}
    drafts: list[FactDraft] = []
    for s in rank(pool):
        if len(drafts) >= MAX_FACTS:
            break
        claim = classify(s.text, [e.expression for e in s.events])
        if claim is None:
            continue
        draft = _fact(s, claim, scope.zone, related)
        if draft.triple.normalized() not in seen:
            seen.add(draft.triple.normalized())
            drafts.append(draft)
    return drafts


# --- Temporal Memory Tree -----------------------------------------------------------------------------


def _speakers(pool: Iterable[Sentence]) -> list[str]:
    return list(dict.fromkeys(s.speaker for s in pool if s.speaker))


def _summary_header(kind: MemoryKind, start: datetime, pool: Sequence[Sentence], zone: ZoneInfo) -> str:
    day = render_date(start, zone)
    if kind is MemoryKind.SESSION:
        names = _speakers(pool)
        return f"Session on {day} ({', '.join(names)}):" if names else f"Session on {day}:"
    if kind is MemoryKind.DAY:
        return f"Day {day}:"
    if kind is MemoryKind.WEEK:
        return f"Week of {day}:"
    return f"{kind.value.capitalize()} from {day}:"


def summary(
    scope: Scope,
    kind: MemoryKind,
    start: datetime,
    end: datetime,
    children: Sequence[Source],
    history: Sequence[Source],
) -> Written:
    """A header line, then the children's centroid-nearest sentences in time order, leaving out what
    the most recent ``history`` summary already says (unless nothing else is left)."""
    pool = sentences(children, scope.zone)
    header = _summary_header(kind, start, pool, scope.zone)
    latest = _canonical(history)[-1:]
    said = frozenset(_key(s) for s in sentences(latest, scope.zone))
    ranked = rank(_informative(pool))
    limit = SUMMARY_SENTENCES.get(kind, DEFAULT_SUMMARY_SENTENCES)
    chosen = _in_time_order(_select(ranked, limit, skip=said) or _select(ranked, limit))
    text = f"{header}\n{narrate(chosen, scope.zone)}" if chosen else header
    return _provenance(text, chosen, scope.zone)


def _last_month(start: datetime, end: datetime, zone: ZoneInfo) -> str:
    last = end - timedelta(microseconds=1) if end > start else start
    return _month(last.astimezone(zone).date())


def profile(
    scope: Scope,
    start: datetime,
    end: datetime,
    children: Sequence[Source],
    previous: Source | None,
) -> Written:
    """A "Profile as of May 2023:" header, then preference and identity statements, one a line, the month's
    newest first, then the previous profile's lines; distinct, at most PROFILE_LINES."""
    pool = sentences(children, scope.zone)
    newest = sorted((s for s in pool if _is_trait(s)), key=lambda s: s.order, reverse=True)
    kept = _memory_sentences(previous, 0, scope.zone) if previous is not None else []
    chosen = _select([*newest, *kept], PROFILE_LINES) or rank(_informative(pool))[:1]
    lines = [render(s, scope.zone) for s in chosen]
    text = "\n".join([f"Profile as of {_last_month(start, end, scope.zone)}:", *lines])
    return _provenance(text, chosen, scope.zone)


def durative(scope: Scope, month: datetime, cluster: Sequence[Source]) -> tuple[Written, Written]:
    """TSM durative memory of one cluster of facts: a topic summary (its TOPIC_SENTENCES
    centroid-nearest sentences) and a persona summary (its preference and identity statements)."""
    label = _month(month.astimezone(scope.zone).date())
    ranked = rank(_informative(sentences(cluster, scope.zone)))
    topic = _in_time_order(_select(ranked, TOPIC_SENTENCES))
    persona = _in_time_order(_select((s for s in ranked if _is_trait(s)), PERSONA_SENTENCES) or ranked[:1])
    return (
        _provenance(f"Topic in {label}: {narrate(topic, scope.zone)}".rstrip(), topic, scope.zone),
        _provenance(f"Persona in {label}: {narrate(persona, scope.zone)}".rstrip(), persona, scope.zone),
    )


# --- the Writer ---------------------------------------------------------------------------------------


class ExtractiveWriter:
    """``consumers.writer.Writer`` over the functions above: no LLM, no I/O, zero tokens."""

    model: str | None = None
    extractive = True  # and zero tokens: nothing here calls a model

    def label(self, stage: str) -> str:
        return WRITER_NAME  # one version for every stage: there is no prompt to tell apart

    async def episodes(
        self, scope: Scope, units: Sequence[Source], merge_into: Source | None
    ) -> list[EpisodeDraft]:
        return episodes(scope, units, merge_into)

    async def facts(
        self, scope: Scope, episode: EpisodeDraft, units: Sequence[Source], related: Sequence[Memory]
    ) -> list[FactDraft]:
        return facts(scope, episode, units, related)

    async def summary(
        self,
        scope: Scope,
        kind: MemoryKind,
        start: datetime,
        end: datetime,
        children: Sequence[Source],
        history: Sequence[Source],
    ) -> Written:
        return summary(scope, kind, start, end, children, history)

    async def profile(
        self,
        scope: Scope,
        start: datetime,
        end: datetime,
        children: Sequence[Source],
        previous: Source | None,
    ) -> Written:
        return profile(scope, start, end, children, previous)

    async def durative(
        self, scope: Scope, month: datetime, cluster: Sequence[Source]
    ) -> tuple[Written, Written]:
        return durative(scope, month, cluster)

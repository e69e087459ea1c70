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
    "Statement",
    "anchor",
    "centrality",
    "classify",
    "durative",
    "episodes",
    "facts",
    "is_phatic",
    "is_question",
    "is_trivial",
    "narrate",
    "profile",
    "rank",
    "render",
    "render_date",
    "render_interval",
    "render_statement",
    "sentences",
    "split_sentences",
    "summary",
]

WRITER_NAME = "extractive@3"  # 2: provenance names the quoted turns only; 3: facts, profiles,
# topics and personas are dated third-person statements, episodes grouped by speaker without small talk

# --- tunables -----------------------------------------------------------------------------------------
PHATIC_WORDS = 3  # a sentence with no claim, name, number or time and this few content words names nothing
MIN_WORDS = 4  # fewer content words than this is small talk ("That's great, Mel!")
EPISODE_GAP = timedelta(days=7)  # units further apart than this belong to different episodes
MAX_EPISODES = 3
EPISODE_SENTENCES = 6
EPISODE_WORDS = 120
MERGED_MAX_CHARS = 1_500  # a merged episode stops growing here (its newest least central sentences go)
MAX_FACTS = 12
OBJECT_WORDS = 8  # a triple's object is a short phrase, not the rest of the sentence
SUMMARY_SENTENCES = {MemoryKind.SESSION: 5, MemoryKind.DAY: 5, MemoryKind.WEEK: 6}
DEFAULT_SUMMARY_SENTENCES = 5
PROFILE_STATEMENTS = 8  # per person
TOPIC_STATEMENTS = 3
PERSONA_STATEMENTS = 5
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
    item: bool = False  # a statement of a "Subject — ...; ..." line ("loves dancing (since May 2023)")

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
        listed = _STATEMENT_LINE.match(line)
        if listed:  # "Caroline — loves dancing (since May 2023); ...": one sentence per statement
            ts = source.ts.astimezone(zone)
            for item in _items(listed["items"]):
                out.append(
                    Sentence(item, item, listed["subject"], ts, False, source.id, index, len(out), item=True)
                )
            continue
        speaker: str | None = None  # a narrative names a speaker when it changes, within a line
        for piece in split_sentences(line, labelled=True):
            body = piece
            m = _RENDERED.match(piece)
            if m:
                day = (_parse_day(m["day"]) or day) if m["day"] else day
                speaker, body = m["speaker"], m["body"]
            ts = datetime.combine(day, time(), zone) if day else source.ts.astimezone(zone)
            out.append(Sentence(body, body, speaker, ts, day is not None, source.id, index, len(out)))
    return _attributed(out, source)


# "Subject — statement; statement": how profiles, topics and personas list what a person said.
_STATEMENT_LINE = re.compile(r"^(?P<subject>[^\s—:][^—:\n]{0,79}?) — (?P<items>\S.*)$")


def _items(listed: str) -> list[str]:
    """The statements of a line, split at the "; " outside parentheses."""
    out: list[str] = []
    depth, begin = 0, 0
    for i, char in enumerate(listed):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and listed.startswith("; ", i):
            out.append(listed[begin:i])
            begin = i + 2
    out.append(listed[begin:])
    return [item.strip() for item in out if item.strip()]


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
    """The sentences as one paragraph, grouped by day and within a day by speaker (in the order they
    first spoke), naming the date and the speaker only when they change."""
    groups: dict[tuple[str | None, str | None], list[Sentence]] = {}
    for s in chosen:
        groups.setdefault((render_date(s.ts, zone) if s.dated else None, s.speaker), []).append(s)
    out: list[str] = []
    previous: tuple[str | None, str | None] = (None, None)
    for (day, speaker), said in sorted(groups.items(), key=lambda g: _first_day(g[1], groups)):
        for s in said:
            new_day = day is not None and day != previous[0]
            label = f"{speaker}: " if speaker and (new_day or speaker != previous[1]) else ""
            out.append((f"On {day}, " if new_day else "") + label + _terminated(s.anchored))
            previous = (day or previous[0], speaker)
    return " ".join(out)


def _first_day(
    said: list[Sentence], groups: dict[tuple[str | None, str | None], list[Sentence]]
) -> tuple[tuple[datetime, int, int], tuple[datetime, int, int]]:
    """A group's place: its day's first sentence, then its own first sentence."""
    day = next(key[0] for key, group in groups.items() if group is said)
    opening = min(s.order for key, group in groups.items() if key[0] == day for s in group)
    return opening, said[0].order


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


_VOCATIVE = re.compile(r",\s*[A-Z][\w'’-]*(?=\s*[,.!?]|$)")  # "Wow, Caroline, ...": an address, not a name


def is_phatic(text: str) -> bool:
    """Small talk that names nothing: trivial, or no claim about the speaker, no time, no name or
    number, and at most PHATIC_WORDS content words ("Let's plan something special!", "It means a
    lot to share this with you")."""
    if is_trivial(text):
        return True
    plain = _plain(text)
    if classify(plain) is not None or extract_event_times(
        plain, datetime(2000, 1, 1, tzinfo=ZoneInfo("UTC"))
    ):
        return False
    words = _WORD.findall(_VOCATIVE.sub("", plain))
    if any(w[0].isdigit() or (i > 0 and w[0].isupper() and not _is_i(w)) for i, w in enumerate(words)):
        return False
    stems = (w.lower().replace("’", "'").split("'")[0] for w in words)  # "it's" -> "it"
    content = [w for w in stems if w not in ENGLISH_STOP_WORDS and w not in _INTERJECTIONS and len(w) > 2]
    return len(content) <= PHATIC_WORDS


def _informative(pool: Sequence[Sentence]) -> list[Sentence]:
    """The best non-empty tier of ``pool``: statements that name something, else any statement,
    else questions, else small talk."""
    substantial = [s for s in pool if not is_trivial(s.text)]
    statements = [s for s in substantial if not is_question(s.text)]
    named = [s for s in statements if not is_phatic(s.text)]
    return named or statements or substantial or list(pool)


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
    if _PLANS[verb] == "plans to" and re.match(r"[a-z]+ing\b", m["obj"], re.I):
        return "plans on", m["obj"]  # "thinking about going camping": plans on going camping
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
    r"[,;:!?()\[\]\"“”→]|\.(?!\d)|\s[-–—]|[-–—]\s|\s(?:but|because|'cause|cause|which|who|since|although|though|"
    r"while|when|whereas|until|unless|so)\s|\s(?:and|so|but|then|that|after|before|if|as|where|what|how|why|"
    r"whether)\s+(?:i|i'm|i've|i'd|i'll|it|it's|we|they|he|she|you|that|this|there|my|[a-z]+ed)\b",
    re.IGNORECASE,
)
# A third-person statement of a first-person object: one rule everywhere, "my own studio" -> "their
# own studio". Second-person words name the other speaker, whom a statement cannot resolve.
_FIRST_PERSON = {
    "i": "they", "i'm": "they're", "i've": "they've", "i'd": "they'd", "i'll": "they'll", "me": "them",
    "my": "their", "mine": "theirs", "myself": "themselves", "we": "they", "we're": "they're",
    "we've": "they've", "us": "them", "our": "their", "ours": "theirs", "ourselves": "themselves",
}  # fmt: skip
_SECOND_PERSON = _words("you you're you've you'd you'll your yours yourself yourselves ya")
# An object made only of these points at something the sentence does not name: "I painted this".
_VAGUE = _words(
    "this that these those it them him her one ones something anything everything nothing stuff thing "
    "things lot lots some all both there here a an the so too more much again same kind sort way"
)
_POINTERS = _words("this that these those it them")
_PARTICLES = _words(_PARTICLE.replace("|", " ") + " after before during since while")
_LOOSE_ENDS = _words(
    "and or with to for of at in on the a an my our so too as really very just from by about"
)


_BE_FORMS = _words("is are was were")


def _one_clause(phrase: str) -> str:
    """``phrase`` up to an "and" that opens a new clause, one with its own verb: "a risotto and the
    whole family loved it" -> "a risotto"; "peanuts and shellfish" stays whole."""
    words = phrase.split()
    for i, word in enumerate(words):
        rest = [w.lower().strip(".!?'’") for w in words[i + 1 :]]
        if word.lower() == "and" and any(w in _BE_FORMS or _is_past(w) for w in rest):
            return " ".join(words[:i])
        if i > 0 and word.lower() in _BE_FORMS:  # "helping create a loving world is amazing"
            return " ".join(words[:i])
    return phrase


def _object(raw: str, expressions: Sequence[str]) -> str:
    """The object phrase: up to the end of its clause, without time expressions, at most OBJECT_WORDS
    words, loose function words trimmed; "" when nothing but function words is left."""
    cut = _CLAUSE_END.search(raw)
    phrase = _one_clause(raw[: cut.start()] if cut else raw)
    for expression in sorted(expressions, key=len, reverse=True):
        for m in reversed(_mentions(phrase, expression)):
            phrase = phrase[: m.start()] + phrase[m.end() :]
    words = phrase.split()[:OBJECT_WORDS]
    while words and words[-1].lower() in _LOOSE_ENDS:
        words.pop()
    if not words or words[0].lower() in {"and", "or", "so", "then"}:
        return ""  # the verb had no object: "we bond and understand each other"
    bare = [w.lower().replace("’", "'").strip("'") for w in words]
    if all(w in ENGLISH_STOP_WORDS for w in bare) or all(w in _VAGUE for w in bare):
        return ""  # "I painted this", "I love it"
    if bare[0] in _POINTERS and (len(bare) == 1 or bare[1] in _LOOSE_ENDS or bare[1] in _PARTICLES):
        return ""  # "this after the storm": a pronoun, not "that lake sunrise"
    if any(w in _SECOND_PERSON for w in bare):
        return ""  # "I love your painting": about the other speaker
    return " ".join(_FIRST_PERSON.get(b, w) for w, b in zip(words, bare, strict=True))


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
            if m and rule.build is _relative and not _opens(said[:pos]):
                continue  # "thankful for my friends" says nothing of who they are; "My kids are ..." does
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


def _opens(prefix: str) -> bool:
    """Nothing but interjections before this point: "Yeah, my kids ..." opens with "my kids"."""
    return all(w.lower() in _INTERJECTIONS for w in _WORD.findall(prefix))


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
        sentence=render_statement(_statement(s, claim, zone)),
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


# --- statements ---------------------------------------------------------------------------------------
# Facts, profiles, topics and personas say what a person said as dated third-person statements built
# from the claim's triple: "Caroline loves painting sunsets (since 8 May 2023)." Profiles, topics and
# personas list them one line per person, "Caroline — loves painting sunsets (since 8 May 2023);
# lives in New York → Boston (since the week of 29 May 2023)", each statement once, and read their
# own lines back (``_STATEMENT_LINE``) to carry them forward.


@dataclass(frozen=True)
class Statement:
    """A claim about a person with the dates it was said."""

    subject: str
    predicate: str  # "" when read back from a line without a known single-valued predicate
    object: str
    when: str  # the label of its date: "8 May 2023", "the week of 29 May 2023", "2022"
    said: date  # the day it was (last) said, for order
    again: date | None  # a later day it was said again, with another date
    state: bool  # it holds from then on (a preference or relation): "since ..."
    turn_ids: tuple[str, ...]
    before: tuple[str, ...] = ()  # older objects of its single-valued slot, oldest first

    @property
    def phrase(self) -> str:
        return " ".join(p for p in (self.predicate, " → ".join([*self.before, self.object])) if p)

    @property
    def slot(self) -> str | None:
        return _FAMILIES.get(_collapse(self.predicate))

    @property
    def key(self) -> tuple[str, str]:
        """Two statements with one key say the same thing (or fill the same single-valued slot)."""
        return (_collapse(self.subject), f"slot {self.slot}" if self.slot else _collapse(self.phrase))

    @property
    def note(self) -> str:
        again = f", again {_day(self.again)}" if self.again else ""
        return f"{'since ' if self.state else ''}{self.when}{again}"

    @property
    def item(self) -> str:
        return f"{self.phrase} ({self.note})"


_STATES = frozenset({FactType.PREFERENCE, FactType.ENTITY_RELATION})
_NOTED = re.compile(r"\(([^()]*\b\d{4}\b[^()]*)\)")  # an anchored date: "(the week of 29 May 2023)"
_DAY_LABEL = re.compile(r"\b\d{1,2} [A-Z][a-z]+ \d{4}\b")
_NOTE = re.compile(
    r"^(?P<phrase>.*?)\s*\((?P<state>since )?(?P<when>[^()]*?)(?:, again (?P<latest>[^()]*))?\)\.?$"
)


def _statement(s: Sentence, claim: Claim, zone: ZoneInfo) -> Statement:
    """What sentence ``s`` claims, dated by its first time expression (resolved, or as a memory
    anchored it), else by the day it was said."""
    assert s.speaker is not None
    said = s.ts.astimezone(zone).date()
    state = claim.fact_type in _STATES
    noted = _NOTED.search(s.text) if not s.events else None
    if state:  # a preference or relation holds from when it was said; a time in it dates something else
        when = render_date(s.ts, zone)
    else:
        when = (
            render_interval(s.events[0], zone) if s.events else noted[1] if noted else render_date(s.ts, zone)
        )
    return Statement(s.speaker, claim.predicate, claim.object, when, said, None, state, s.turn_ids)


def render_statement(st: Statement) -> str:
    """ "Caroline went to the LGBTQ support group (7 May 2023)." """
    joint = "'s " if st.predicate.startswith("favourite") else " "
    return f"{st.subject}{joint}{st.item}."


def _read_statement(subject: str, text: str, ts: datetime, turn_ids: tuple[str, ...]) -> Statement | None:
    """A statement as ``Statement.item`` wrote it (``text``), about ``subject``."""
    m = _NOTE.match(text)
    if m is None or not m["phrase"]:
        return None
    days = [d for d in (_parse_day(x) for x in _DAY_LABEL.findall(m["when"])) if d]
    again = _parse_day(m["latest"]) if m["latest"] and _DAY_LABEL.fullmatch(m["latest"]) else None
    said = again or (days[-1] if days else ts.date())
    segments = m["phrase"].split(" → ")
    predicate, head = "", segments[0]
    for known in sorted(_FAMILIES, key=len, reverse=True):  # a single-valued slot: keep its predicate
        if _collapse(head).startswith(f"{known} "):
            predicate, head = head[: len(known)], head[len(known) + 1 :]
            break
    objects = [head, *segments[1:]]
    return Statement(
        subject, predicate, objects[-1], m["when"], said, again, bool(m["state"]), turn_ids,
        tuple(objects[:-1]),
    )  # fmt: skip


def _statements(
    pool: Iterable[Sentence], zone: ZoneInfo, keep: Callable[[FactType], bool]
) -> list[Statement]:
    """The statements of ``pool`` whose claim type ``keep`` accepts: read back from statement lines,
    or built from a first-person sentence's claim."""
    out: list[Statement] = []
    for s in pool:
        if s.item and s.speaker:
            read = _read_statement(s.speaker, s.text, s.ts, s.turn_ids)
            if read is not None and keep(_TYPE_OF_READ):
                out.append(read)
        elif _has_subject(s) and not is_trivial(s.text):
            claim = _claim_of(s)
            if claim is not None and keep(claim.fact_type):
                out.append(_statement(s, claim, zone))
    return out


def _claim_of(s: Sentence) -> Claim | None:
    """The claim of a sentence, its time expressions (a memory's are found again) left out."""
    plain = _plain(s.text)
    events = s.events or tuple(extract_event_times(plain, s.ts))
    return classify(plain, [e.expression for e in events])


# A statement read back from a line was kept there as a trait: it stays one.
_TYPE_OF_READ = FactType.PREFERENCE


def _fact_statement(source: Source, zone: ZoneInfo) -> Statement | None:
    """A fact memory's statement, from its triple; its dates from the note its text ends with."""
    if source.triple is None:
        return None
    t = source.triple
    said = (source.start or source.ts).astimezone(zone)
    m = _NOTE.match(source.text.strip())
    state = source.fact_type in _STATES
    if m is None:
        day = said.date()
        return Statement(t.subject, t.predicate, t.object, _day(day), day, None, state, source.turn_ids)
    read = _read_statement(t.subject, f"x ({m['state'] or ''}{m['when']})", said, source.turn_ids)
    assert read is not None
    return replace(read, predicate=t.predicate, object=t.object, state=state)


def _merged(statements: Iterable[Statement]) -> list[Statement]:
    """Each statement once, oldest first: a repeat with another date keeps the first and notes the
    latest ("again ..."); a new object in a single-valued slot replaces the old one, which stays
    before it ("Lisbon → Porto")."""
    by: dict[tuple[str, str], Statement] = {}
    for st in sorted(statements, key=lambda st: st.said):
        old = by.get(st.key)
        turns = tuple(dict.fromkeys((*old.turn_ids, *st.turn_ids))) if old else st.turn_ids
        if old is None:
            by[st.key] = st
        elif old.slot is not None and _collapse(old.object) != _collapse(st.object):
            earlier = [*old.before, old.object, *st.before]
            before = tuple(dict.fromkeys(o for o in earlier if _collapse(o) != _collapse(st.object)))
            by[st.key] = replace(st, predicate=old.predicate, before=before, turn_ids=turns)
        elif st.when != old.when and st.said > old.said:
            again = max(st.said, old.again or st.said)
            by[st.key] = replace(old, said=st.said, again=again, turn_ids=turns)
        else:
            by[st.key] = replace(old, turn_ids=turns)
    return list(by.values())


_LIKING = (*_LIKES.values(), "favourite", "is allergic", "is into", "is a fan", "is fan", "is keen")
_KIND_ORDER = (  # how a person's line is grouped: likes, who they are and know, where, work, the rest
    (*_LIKING, "is passionate", "is obsessed", "is crazy", "is afraid", "is scared", "is not"),
    ("is ", "has "),
    ("lives", "moved", "relocated", "grew up", "comes from", "is from"),
    ("works", "started working", "studies", "volunteers", "graduated", "retired", "quit"),
)


def _group(st: Statement) -> int:
    phrase = _collapse(st.phrase)
    return next((i for i, starts in enumerate(_KIND_ORDER) if phrase.startswith(starts)), len(_KIND_ORDER))


def _restates(st: Statement, other: Statement) -> bool:
    """``other`` says all ``st`` says and more: "plans to make their dreams come true" within "plans
    to keep pushing and make their dreams come true"."""
    if other is st or _collapse(st.subject) != _collapse(other.subject) or st.slot or other.slot:
        return False
    mine, theirs = _collapse(st.object), _collapse(other.object)
    return (
        _collapse(st.predicate) == _collapse(other.predicate)
        and mine != theirs
        and f" {mine} " in f" {theirs} "
    )


def _statement_lines(statements: Iterable[Statement], per_person: int) -> tuple[list[str], list[Statement]]:
    """One "Subject — statement; ..." line per person (in the order they were first said), at most
    ``per_person`` statements each (the most recently said), grouped by kind, then by date."""
    merged = _merged(statements)
    merged = [st for st in merged if not any(_restates(st, other) for other in merged)]
    subjects = list(dict.fromkeys(_collapse(st.subject) for st in merged))
    lines: list[str] = []
    kept: list[Statement] = []
    for subject in subjects:
        mine = [st for st in merged if _collapse(st.subject) == subject]
        recent = sorted(mine, key=lambda st: st.said, reverse=True)[:per_person]
        chosen = sorted(recent, key=lambda st: (_group(st), st.said, _collapse(st.phrase)))
        lines.append(f"{chosen[0].subject} — " + "; ".join(st.item for st in chosen))
        kept += chosen
    return lines, kept


def _listed(
    header: str, statements: Iterable[Statement], per_person: int, ts: datetime, zone: ZoneInfo
) -> Written:
    """``header`` over the statements' lines, naming the turns of the statements it keeps."""
    lines, kept = _statement_lines(statements, per_person)
    quoted = [
        Sentence(st.item, st.item, st.subject, ts, False, "", 0, i, turn_ids=st.turn_ids, item=True)
        for i, st in enumerate(kept)
    ]
    return _provenance("\n".join([header, *lines]), quoted, zone)


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
    """A "Profile as of May 2023:" header, then one line per person of their traits (preferences,
    identity, relations, places, work and the changes to them) as dated statements, each once, the
    previous profile's carried forward; at most PROFILE_STATEMENTS a person, the most recent. With no
    trait at all, the month's most central sentence, quoted."""
    zone = scope.zone
    header = f"Profile as of {_last_month(start, end, zone)}:"
    pool = sentences(children, zone)
    kept = _memory_sentences(previous, 0, zone) if previous is not None else []
    traits = _statements([*kept, *pool], zone, lambda t: t in _TRAITS)
    if traits:
        return _listed(header, traits, PROFILE_STATEMENTS, end, zone)
    chosen = rank(_informative(pool))[:1]
    return _provenance("\n".join([header, *(render(s, zone) for s in chosen)]), chosen, zone)


def durative(scope: Scope, month: datetime, cluster: Sequence[Source]) -> tuple[Written, Written]:
    """TSM durative memory of one cluster of facts, as statement lines: a topic (its TOPIC_STATEMENTS
    most central statements) and a persona (its traits, at most PERSONA_STATEMENTS, else the most
    central statement)."""
    zone = scope.zone
    label = _month(month.astimezone(zone).date())
    typed: list[tuple[Statement, FactType]] = []
    for source in _canonical(cluster):
        fact = _fact_statement(source, zone)
        if fact is not None:
            typed.append((fact, source.fact_type or FactType.USER_EVENT))
            continue
        for s in sentences([source], zone):
            claim = _claim_of(s) if _has_subject(s) and not is_trivial(s.text) else None
            if claim is not None:
                typed.append((_statement(s, claim, zone), claim.fact_type))
    unique = {st.key: (st, t) for st, t in reversed(typed)}  # the first of each
    ranked = _ranked_statements([st for st, _ in unique.values()])
    traits = [st for st in ranked if unique[st.key][1] in _TRAITS]
    if not ranked:  # nothing to state: the most central sentence, quoted
        quoted = rank(_informative(sentences(cluster, zone)))[:1]
        said = narrate(quoted, zone)
        return (
            _provenance(f"Topic in {label}: {said}".rstrip(), quoted, zone),
            _provenance(f"Persona in {label}: {said}".rstrip(), quoted, zone),
        )
    end = month
    return (
        _listed(f"Topic in {label}:", ranked[:TOPIC_STATEMENTS], TOPIC_STATEMENTS, end, zone),
        _listed(
            f"Persona in {label}:", traits[:PERSONA_STATEMENTS] or ranked[:1], PERSONA_STATEMENTS, end, zone
        ),
    )


def _ranked_statements(statements: Sequence[Statement]) -> list[Statement]:
    """Most central first (TF-IDF over the statements), ties by date then subject and phrase."""
    central = centrality([f"{st.subject} {st.phrase}" for st in statements])
    order = sorted(zip(central, statements, strict=True), key=lambda p: (-p[0], p[1].said, p[1].key))
    return [st for _, st in order]


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

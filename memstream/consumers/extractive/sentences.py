"""Sentences: a source's text cut into dated, attributed sentences, each knowing the turns it quotes.

A unit's sentence is *date-anchored*: each time expression in it is followed by what it resolves
to ("yesterday (7 May 2023)"). A memory's sentences were written that way already: "On <date>,
<Speaker>: " prefixes and "Subject — statement; ..." lines are read back, never re-anchored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, time
from zoneinfo import ZoneInfo

from memstream.consumers.writer import Source, Written
from memstream.core.dates import parse_date, render_interval
from memstream.core.semantic_time import extract_event_times
from memstream.core.sentences import INTERJECTIONS as INTERJECTIONS
from memstream.core.sentences import WORD as WORD
from memstream.core.sentences import is_i as is_i
from memstream.core.sentences import is_trivial as is_trivial
from memstream.core.sentences import split_sentences
from memstream.schemas.events import EventTime

# The small-talk test (is_trivial and its word lists) lives in memstream.core.sentences, which recall
# shares: it renders a unit without its small talk. Re-exported above for the writer's modules.


def word_set(spaced: str) -> frozenset[str]:
    return frozenset(spaced.split())


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


def is_question(text: str) -> bool:
    return text.rstrip(" \"')]”’").endswith("?")


def _opening(line: str, speakers: Sequence[str]) -> tuple[str, str] | None:
    """The speaker and content of a line that opens an utterance, else None. With the unit's
    ``speakers`` known, only a line opening with one of them does (the longest first: a name may
    hold ": "): a message's content may hold line breaks, a caption or a "Name: ..." line of its own.
    Otherwise any ``speaker: `` prefix but a bracketed aside ("[shares a photo: ...]")."""
    if speakers:
        said = next(
            (sp for sp in sorted(speakers, key=len, reverse=True) if line.startswith(f"{sp}: ")), None
        )
        return None if said is None else (said, line[len(said) + 2 :])
    m = _UTTERANCE.match(line)
    return (m["speaker"].strip(), m["content"]) if m and not m["speaker"].lstrip().startswith("[") else None


def _utterances(text: str, speakers: Sequence[str]) -> list[tuple[str | None, str]]:
    """A unit's ``speaker: content`` lines; a line without a speaker continues the previous one."""
    out: list[tuple[str | None, str]] = []
    for line in text.splitlines():
        opened = _opening(line, speakers)
        if opened:
            out.append(opened)
        elif line.strip():
            speaker = out[-1][0] if out else None
            out.append((speaker, line))
    return out


def mentions(text: str, expression: str) -> list[re.Match[str]]:
    pattern = r"\s+".join(re.escape(part) for part in expression.split())
    return list(re.finditer(rf"(?<!\w){pattern}(?!\w)", text, re.IGNORECASE))


def _events_in(text: str, known: Sequence[EventTime], said: datetime) -> tuple[EventTime, ...]:
    """The unit's event times whose expression is in this sentence, then any other expression the
    extractor finds in the sentence alone (a unit reports an interval only once)."""
    found = [e for e in known if mentions(text, e.expression)]
    seen = {e.expression.lower() for e in found}
    found += [e for e in extract_event_times(text, said) if e.expression.lower() not in seen]
    return tuple(found)


def _unit_sentences(source: Source, index: int, zone: ZoneInfo) -> list[Sentence]:
    said = source.ts.astimezone(zone)
    out: list[Sentence] = []
    for speaker, content in _utterances(source.text, source.speakers):
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


def memory_sentences(source: Source, index: int, zone: ZoneInfo) -> list[Sentence]:
    """A memory's sentences; "On <date>, <Speaker>: " prefixes are read back, a date carrying on to
    the sentences after it (narratives name the date only when it changes)."""
    day: date | None = None
    out: list[Sentence] = []
    for line in source.text.splitlines():
        line = _HEADER.sub("", line.strip(), count=1) if _is_header(line) else line.strip()
        listed = _STATEMENT_LINE.match(line)
        if listed:  # "Caroline — loves dancing (since May 2023); ...": one sentence per statement
            ts = source.ts.astimezone(zone)
            for item in split_items(listed["items"]):
                out.append(
                    Sentence(item, item, listed["subject"], ts, False, source.id, index, len(out), item=True)
                )
            continue
        speaker: str | None = None  # a narrative names a speaker when it changes, within a line
        for piece in split_sentences(line, labelled=True):
            body = piece
            m = _RENDERED.match(piece)
            if m:
                day = (parse_date(m["day"]) or day) if m["day"] else day
                speaker, body = m["speaker"], m["body"]
            ts = datetime.combine(day, time(), zone) if day else source.ts.astimezone(zone)
            out.append(Sentence(body, body, speaker, ts, day is not None, source.id, index, len(out)))
    return _attributed(out, source)


# "Subject — statement; statement": how profiles, topics and personas list what a person said.
_STATEMENT_LINE = re.compile(r"^(?P<subject>[^\s—:][^—:\n]{0,79}?) — (?P<items>\S.*)$")


def split_items(listed: str) -> list[str]:
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


def provenance(text: str, quoted: Sequence[Sentence], zone: ZoneInfo) -> Written:
    """``text`` with the turns it carries, whole and per sentence as ``memory_sentences`` will read
    it back: a sentence takes the turns of the quoted sentence it renders; one the parse cuts
    differently (rare) takes the turns of every quoted sentence."""
    if not quoted:
        return Written(text, ())
    carried = tuple(dict.fromkeys(t for s in quoted for t in s.turn_ids))
    turns_of: dict[tuple[str, str], tuple[str, ...]] = {}
    for s in quoted:
        turns_of[sentence_key(s)] = tuple(dict.fromkeys((*turns_of.get(sentence_key(s), ()), *s.turn_ids)))
    written = memory_sentences(Source(id="", ts=quoted[0].ts, text=text, turn_ids=()), 0, zone)
    return Written(text, carried, tuple(turns_of.get(sentence_key(s), carried) for s in written))


def _is_header(line: str) -> bool:
    m = _HEADER.match(line.strip())
    return m is not None and not _RENDERED.match(line.strip())


def sentences(sources: Iterable[Source], zone: ZoneInfo) -> list[Sentence]:
    """All sentences of ``sources`` in time order. Sources are sorted by (time, id) and repeated ids
    dropped first, so the result does not depend on the order they were given in. A source with an
    interval (``start``) is a memory, otherwise a unit."""
    out: list[Sentence] = []
    for index, source in enumerate(canonical(sources)):
        read = _unit_sentences if source.start is None else memory_sentences
        out.extend(read(source, index, zone))
    return out


def canonical(sources: Iterable[Source]) -> list[Source]:
    """Sources in (time, id) order, each id once: the input order never matters."""
    unique: dict[str, Source] = {}
    for s in sorted(sources, key=lambda s: (s.ts, s.id, s.text)):
        unique.setdefault(s.id, s)
    return list(unique.values())


def strip_notes(text: str) -> str:
    return _ANNOTATION.sub("", text)


def sentence_key(s: Sentence) -> tuple[str, str]:
    """Identity of a statement: who said it and its words, ignoring case, punctuation and dates."""
    words = " ".join(w.lower() for w in WORD.findall(strip_notes(s.text)))
    return ((s.speaker or "").lower(), words)


def explicit(expression: str, label: str) -> bool:
    """The expression already says what the label would ("in 2022", "May 8, 2023")."""
    said = {w.lower() for w in WORD.findall(expression)}
    named = {w.lower() for w in WORD.findall(label)} - {"the", "week", "weekend", "of"}
    return named <= said


def anchor(text: str, events: Sequence[EventTime], zone: ZoneInfo) -> str:
    """``text`` with each occurrence of an event's expression followed by its resolved date in
    parentheses: "yesterday" -> "yesterday (7 May 2023)". Idempotent."""
    spans: list[tuple[int, int, str]] = []
    for event in events:
        label = render_interval(event, zone)
        if not explicit(event.expression, label):
            spans += [(m.start(), m.end(), label) for m in mentions(text, event.expression)]
    out: list[str] = []
    pos = 0
    for start, end, label in sorted(spans, key=lambda s: (s[0], -s[1])):
        note = f" ({label})"
        if start < pos or text.startswith(note, end):
            continue  # inside an expression already anchored, or anchored before
        out += [text[pos:end], note]
        pos = end
    return "".join(out) + text[pos:]

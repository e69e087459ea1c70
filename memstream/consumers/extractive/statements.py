"""Statements: claims as dated third-person statements, and the person lines that list them.

Facts, profiles, topics and personas say what a person said as statements built from the claim's
triple: "Caroline loves painting sunsets (since 8 May 2023)." Profiles, topics and personas list
them one line per person, "Caroline — loves painting sunsets (since 8 May 2023); lives in New York
→ Boston (since the week of 29 May 2023)", each statement once, and read their own lines back
(``sentences.memory_sentences``) to carry them forward.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import date, datetime
from zoneinfo import ZoneInfo

from memstream.consumers.extractive.claims import FAMILIES, LIKES, Claim, classify, collapse, has_subject
from memstream.consumers.extractive.sentences import Sentence, is_trivial, provenance, strip_notes
from memstream.consumers.writer import Source, Written
from memstream.core.dates import format_date, parse_date, render_date, render_interval
from memstream.core.semantic_time import extract_event_times
from memstream.schemas.memory import FactType


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
        return FAMILIES.get(collapse(self.predicate))

    @property
    def key(self) -> tuple[str, str]:
        """Two statements with one key say the same thing (or fill the same single-valued slot)."""
        return (collapse(self.subject), f"slot {self.slot}" if self.slot else collapse(self.phrase))

    @property
    def note(self) -> str:
        again = f", again {format_date(self.again)}" if self.again else ""
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


def statement_of(s: Sentence, claim: Claim, zone: ZoneInfo) -> Statement:
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


def read_statement(subject: str, text: str, ts: datetime, turn_ids: tuple[str, ...]) -> Statement | None:
    """A statement as ``Statement.item`` wrote it (``text``), about ``subject``."""
    m = _NOTE.match(text)
    if m is None or not m["phrase"]:
        return None
    days = [d for d in (parse_date(x) for x in _DAY_LABEL.findall(m["when"])) if d]
    again = parse_date(m["latest"]) if m["latest"] and _DAY_LABEL.fullmatch(m["latest"]) else None
    said = again or (days[-1] if days else ts.date())
    segments = m["phrase"].split(" → ")
    predicate, head = "", segments[0]
    for known in sorted(FAMILIES, key=len, reverse=True):  # a single-valued slot: keep its predicate
        if collapse(head).startswith(f"{known} "):
            predicate, head = head[: len(known)], head[len(known) + 1 :]
            break
    objects = [head, *segments[1:]]
    return Statement(
        subject, predicate, objects[-1], m["when"], said, again, bool(m["state"]), turn_ids,
        tuple(objects[:-1]),
    )  # fmt: skip


def statements_in(
    pool: Iterable[Sentence], zone: ZoneInfo, keep: Callable[[FactType], bool]
) -> list[Statement]:
    """The statements of ``pool`` whose claim type ``keep`` accepts: read back from statement lines,
    or built from a first-person sentence's claim."""
    out: list[Statement] = []
    for s in pool:
        if s.item and s.speaker:
            read = read_statement(s.speaker, s.text, s.ts, s.turn_ids)
            if read is not None and keep(_TYPE_OF_READ):
                out.append(read)
        elif has_subject(s) and not is_trivial(s.text):
            claim = claim_of(s)
            if claim is not None and keep(claim.fact_type):
                out.append(statement_of(s, claim, zone))
    return out


def claim_of(s: Sentence) -> Claim | None:
    """The claim of a sentence, its time expressions (a memory's are found again) left out."""
    plain = strip_notes(s.text)
    events = s.events or tuple(extract_event_times(plain, s.ts))
    return classify(plain, [e.expression for e in events])


# A statement read back from a line was kept there as a trait: it stays one.
_TYPE_OF_READ = FactType.PREFERENCE


def fact_statement(source: Source, zone: ZoneInfo) -> Statement | None:
    """A fact memory's statement, from its triple; its dates from the note its text ends with."""
    if source.triple is None:
        return None
    t = source.triple
    said = (source.start or source.ts).astimezone(zone)
    m = _NOTE.match(source.text.strip())
    state = source.fact_type in _STATES
    if m is None:
        day = said.date()
        return Statement(
            t.subject, t.predicate, t.object, format_date(day), day, None, state, source.turn_ids
        )
    read = read_statement(t.subject, f"x ({m['state'] or ''}{m['when']})", said, source.turn_ids)
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
        elif old.slot is not None and collapse(old.object) != collapse(st.object):
            earlier = [*old.before, old.object, *st.before]
            before = tuple(dict.fromkeys(o for o in earlier if collapse(o) != collapse(st.object)))
            by[st.key] = replace(st, predicate=old.predicate, before=before, turn_ids=turns)
        elif st.when != old.when and st.said > old.said:
            again = max(st.said, old.again or st.said)
            by[st.key] = replace(old, said=st.said, again=again, turn_ids=turns)
        else:
            by[st.key] = replace(old, turn_ids=turns)
    return list(by.values())


_LIKING = (*LIKES.values(), "favourite", "is allergic", "is into", "is a fan", "is fan", "is keen")
_KIND_ORDER = (  # how a person's line is grouped: likes, who they are and know, where, work, the rest
    (*_LIKING, "is passionate", "is obsessed", "is crazy", "is afraid", "is scared", "is not"),
    ("is ", "has "),
    ("lives", "moved", "relocated", "grew up", "comes from", "is from"),
    ("works", "started working", "studies", "volunteers", "graduated", "retired", "quit"),
)


def _group(st: Statement) -> int:
    phrase = collapse(st.phrase)
    return next((i for i, starts in enumerate(_KIND_ORDER) if phrase.startswith(starts)), len(_KIND_ORDER))


def _restates(st: Statement, other: Statement) -> bool:
    """``other`` says all ``st`` says and more: "plans to make their dreams come true" within "plans
    to keep pushing and make their dreams come true"."""
    if other is st or collapse(st.subject) != collapse(other.subject) or st.slot or other.slot:
        return False
    mine, theirs = collapse(st.object), collapse(other.object)
    return (
        collapse(st.predicate) == collapse(other.predicate)
        and mine != theirs
        and f" {mine} " in f" {theirs} "
    )


def _statement_lines(statements: Iterable[Statement], per_person: int) -> tuple[list[str], list[Statement]]:
    """One "Subject — statement; ..." line per person (in the order they were first said), at most
    ``per_person`` statements each (the most recently said), grouped by kind, then by date."""
    merged = _merged(statements)
    merged = [st for st in merged if not any(_restates(st, other) for other in merged)]
    subjects = list(dict.fromkeys(collapse(st.subject) for st in merged))
    lines: list[str] = []
    kept: list[Statement] = []
    for subject in subjects:
        mine = [st for st in merged if collapse(st.subject) == subject]
        recent = sorted(mine, key=lambda st: st.said, reverse=True)[:per_person]
        chosen = sorted(recent, key=lambda st: (_group(st), st.said, collapse(st.phrase)))
        lines.append(f"{chosen[0].subject} — " + "; ".join(st.item for st in chosen))
        kept += chosen
    return lines, kept


def statement_list(
    header: str, statements: Iterable[Statement], per_person: int, ts: datetime, zone: ZoneInfo
) -> Written:
    """``header`` over the statements' lines, naming the turns of the statements it keeps."""
    lines, kept = _statement_lines(statements, per_person)
    quoted = [
        Sentence(st.item, st.item, st.subject, ts, False, "", 0, i, turn_ids=st.turn_ids, item=True)
        for i, st in enumerate(kept)
    ]
    return provenance("\n".join([header, *lines]), quoted, zone)

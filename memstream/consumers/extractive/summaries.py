"""The Temporal Memory Tree's text: session, day and week summaries, profiles, topics and personas."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from memstream.consumers.extractive.centrality import centrality, in_time_order, informative, rank, select
from memstream.consumers.extractive.claims import TRAITS, has_subject
from memstream.consumers.extractive.digests import digest
from memstream.consumers.extractive.rendering import narrate, render
from memstream.consumers.extractive.sentences import (
    Sentence,
    canonical,
    is_trivial,
    memory_sentences,
    provenance,
    sentence_key,
    sentences,
)
from memstream.consumers.extractive.statements import (
    Statement,
    claim_of,
    fact_statement,
    statement_list,
    statement_of,
    statements_in,
)
from memstream.consumers.writer import ProfileRequest, Scope, Source, SummaryRequest, Written
from memstream.core.dates import format_month, render_date
from memstream.schemas.memory import FactType, MemoryKind

SUMMARY_SENTENCES = {MemoryKind.SESSION: 5, MemoryKind.DAY: 5, MemoryKind.WEEK: 6}
DEFAULT_SUMMARY_SENTENCES = 5
PROFILE_STATEMENTS = 8  # per person
TOPIC_STATEMENTS = 3
PERSONA_STATEMENTS = 5


def _participants(children: Sequence[Source], pool: Iterable[Sentence]) -> list[str]:
    """Who took part: the units' speakers as sent; the parsed speakers only for sources that carry
    none (built by hand, not from a ``Unit``)."""
    sent = [sp for child in canonical(children) for sp in child.speakers]
    return list(dict.fromkeys(sent or (s.speaker for s in pool if s.speaker)))


def _summary_header(kind: MemoryKind, start: datetime, names: Sequence[str], zone: ZoneInfo) -> str:
    day = render_date(start, zone)
    if kind is MemoryKind.SESSION:
        return f"Session on {day} ({', '.join(names)}):" if names else f"Session on {day}:"
    if kind is MemoryKind.DAY:
        return f"Day {day}:"
    if kind is MemoryKind.WEEK:
        return f"Week of {day}:"
    return f"{kind.value.capitalize()} from {day}:"


_SUMMARY_HEADER = re.compile(r"(?:Session on|Day|Week of) [^\n]*:")


def retitled(text: str, kind: MemoryKind, start: datetime, zone: ZoneInfo) -> str:
    """A day's or a week's text taken whole from its one child, under its own header ("Day 8 May
    2023:", not the session's "Session on ... (names):"). A text without such a header (the LLM
    writer's) is left as it is."""
    first, newline, rest = text.partition("\n")
    if not _SUMMARY_HEADER.fullmatch(first):
        return text
    return f"{_summary_header(kind, start, (), zone)}{newline}{rest}"


def summary(scope: Scope, request: SummaryRequest) -> Written:
    """Who did what (``digests.digest``): from a session's units, or from ``said``, the turns below a
    day or a week. With none of them informative, or none given (a day or week without its turns), a
    header line, then the children's centroid-nearest sentences in time order, leaving out what the
    most recent ``history`` summary already says (unless nothing else is left)."""
    kind, start, children, history, said = (
        request.kind,
        request.start,
        request.children,
        request.history,
        request.said,
    )
    turns = children if kind is MemoryKind.SESSION else said
    if turns:
        written = digest(scope, kind, start, turns)
        if written.turn_ids:
            return written
    pool = sentences(children, scope.zone)
    header = _summary_header(kind, start, _participants(children, pool), scope.zone)
    latest = canonical(history)[-1:]
    told = frozenset(sentence_key(s) for s in sentences(latest, scope.zone))
    ranked = rank(informative(pool))
    limit = SUMMARY_SENTENCES.get(kind, DEFAULT_SUMMARY_SENTENCES)
    chosen = in_time_order(select(ranked, limit, skip=told) or select(ranked, limit))
    text = f"{header}\n{narrate(chosen, scope.zone)}" if chosen else header
    return provenance(text, chosen, scope.zone)


def _last_month(start: datetime, end: datetime, zone: ZoneInfo) -> str:
    last = end - timedelta(microseconds=1) if end > start else start
    return format_month(last.astimezone(zone).date())


def profile(scope: Scope, request: ProfileRequest) -> Written:
    """A "Profile as of May 2023:" header, then one line per person of their traits (preferences,
    identity, relations, places, work and the changes to them) as dated statements, each once, the
    previous profile's carried forward; at most PROFILE_STATEMENTS a person, the most recent. With no
    trait at all, the month's most central sentence, quoted. Traits are claims of first-person
    sentences: read from ``said`` (the month's turns) when given, as the weeks tell them in the third
    person, else from ``children``."""
    start, end, children, previous, said = (
        request.start,
        request.end,
        request.children,
        request.previous,
        request.said,
    )
    zone = scope.zone
    header = f"Profile as of {_last_month(start, end, zone)}:"
    pool = sentences(said or children, zone)
    kept = memory_sentences(previous, 0, zone) if previous is not None else []
    traits = statements_in([*kept, *pool], zone, lambda t: t in TRAITS)
    if traits:
        return statement_list(header, traits, PROFILE_STATEMENTS, end, zone)
    chosen = rank(informative(pool))[:1]
    return provenance("\n".join([header, *(render(s, zone) for s in chosen)]), chosen, zone)


def durative(scope: Scope, month: datetime, cluster: Sequence[Source]) -> tuple[Written, Written]:
    """TSM durative memory of one cluster of facts, as statement lines: a topic (its TOPIC_STATEMENTS
    most central statements) and a persona (its traits, at most PERSONA_STATEMENTS, else the most
    central statement)."""
    zone = scope.zone
    label = format_month(month.astimezone(zone).date())
    typed: list[tuple[Statement, FactType]] = []
    for source in canonical(cluster):
        fact = fact_statement(source, zone)
        if fact is not None:
            typed.append((fact, source.fact_type or FactType.USER_EVENT))
            continue
        for s in sentences([source], zone):
            claim = claim_of(s) if has_subject(s) and not is_trivial(s.text) else None
            if claim is not None:
                typed.append((statement_of(s, claim, zone), claim.fact_type))
    unique = {st.key: (st, t) for st, t in reversed(typed)}  # the first of each
    ranked = _ranked_statements([st for st, _ in unique.values()])
    traits = [st for st in ranked if unique[st.key][1] in TRAITS]
    if not ranked:  # nothing to state: the most central sentence, quoted
        quoted = rank(informative(sentences(cluster, zone)))[:1]
        said = narrate(quoted, zone)
        return (
            provenance(f"Topic in {label}: {said}".rstrip(), quoted, zone),
            provenance(f"Persona in {label}: {said}".rstrip(), quoted, zone),
        )
    end = month
    return (
        statement_list(f"Topic in {label}:", ranked[:TOPIC_STATEMENTS], TOPIC_STATEMENTS, end, zone),
        statement_list(
            f"Persona in {label}:", traits[:PERSONA_STATEMENTS] or ranked[:1], PERSONA_STATEMENTS, end, zone
        ),
    )


def _ranked_statements(statements: Sequence[Statement]) -> list[Statement]:
    """Most central first (TF-IDF over the statements), ties by date then subject and phrase."""
    central = centrality([f"{st.subject} {st.phrase}" for st in statements])
    order = sorted(zip(central, statements, strict=True), key=lambda p: (-p[0], p[1].said, p[1].key))
    return [st for _, st in order]

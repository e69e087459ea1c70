"""Facts: the claims of an episode's units as time-scoped triples, superseding what they change."""

from __future__ import annotations

from collections.abc import Sequence
from zoneinfo import ZoneInfo

from memstream.consumers.extractive.centrality import rank
from memstream.consumers.extractive.claims import FAMILIES, Claim, classify, collapse, has_subject
from memstream.consumers.extractive.sentences import Sentence, is_trivial, sentences
from memstream.consumers.extractive.statements import render_statement, statement_of
from memstream.consumers.writer import EpisodeDraft, FactDraft, Scope, Source
from memstream.schemas.memory import FactType, Memory, Triple

MAX_FACTS = 12


def _slot(triple: Triple) -> tuple[str, str] | None:
    family = FAMILIES.get(collapse(triple.predicate))
    return (collapse(triple.subject), family) if family else None


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
        and collapse(m.triple.object) != collapse(triple.object)
    ]
    return tuple(dict.fromkeys(ids))


def _fact(s: Sentence, claim: Claim, zone: ZoneInfo, related: Sequence[Memory]) -> FactDraft:
    assert s.speaker is not None
    event = s.events[0] if s.events else None
    triple = Triple(subject=s.speaker, predicate=claim.predicate, object=claim.object)
    bounded_past = event is not None and claim.fact_type is FactType.USER_EVENT and event.end <= s.ts
    return FactDraft(
        sentence=render_statement(statement_of(s, claim, zone)),
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
    pool = [s for s in sentences(mine, scope.zone) if has_subject(s) and not is_trivial(s.text)]
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

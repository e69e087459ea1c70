"""The LLM writer: the prompts of ``memstream.core.prompts`` through ``memstream.adapters.llm.LLMClient``.

Each method renders its sources as dated, id-tagged lines inside the prompt's data fence, calls
one stage (``episodes``, ``facts``, ``summary``, ``profile``, ``durative``), and turns the parsed
answer into drafts. Every answer cites the ids of the sources whose content it states: those
are its provenance (a cited unit gives its turn, a cited memory the turns its own text carries).
Ids the model invents are dropped, so provenance only names real sources. When it cites no real
source, the memory states no turns (``source_turn_ids`` empty: recall credits it with nothing)
while it still covers every source it was written from; guessing would credit turns it may not
carry. Dates the model gives are read in the user's zone and kept inside the sources' time span.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from typing import Any

from memstream.adapters.llm import LLMClient
from memstream.consumers.writer import (
    EpisodeDraft,
    FactDraft,
    ProfileRequest,
    Scope,
    Source,
    SummaryRequest,
    Written,
)
from memstream.core.plain_text import plain_lines
from memstream.core.prompts import (
    DURATIVE,
    EPISODES,
    FACTS,
    LEVEL_INSTRUCTIONS,
    MERGE,
    PROFILE,
    SUMMARY,
    Prompt,
)
from memstream.schemas.memory import Memory, Triple


class LLMWriter:
    extractive = False

    def __init__(self, client: LLMClient, model: str) -> None:
        self.client = client
        self.model: str | None = model

    def label(self, stage: str) -> str:
        return {
            "episodes": EPISODES.id,
            "merge": MERGE.id,
            "facts": FACTS.id,
            "summary": SUMMARY.id,
            "profile": PROFILE.id,
            "durative": DURATIVE.id,
        }[stage]

    async def _ask(self, stage: str, scope: Scope, prompt: Prompt[Any], **fields: str) -> Any:
        result = await self.client.structured(stage, scope.tenant, prompt.messages(**fields), prompt.response)
        return result.value

    async def episodes(
        self, scope: Scope, units: Sequence[Source], merge_into: Source | None
    ) -> list[EpisodeDraft]:
        if merge_into is None:
            out = await self._ask("episodes", scope, EPISODES, units=render(units, scope))
            answers = out.episodes
        else:
            out = await self._ask(
                "episodes",
                scope,
                MERGE,
                units=render(units, scope),
                existing=merge_into.text,
                existing_dates=_period(merge_into.start or merge_into.ts, merge_into.end, scope),
            )
            answers = out.episodes[:1]
        lo, hi = _span(units, merge_into)
        drafts = []
        for ep in answers:
            ids = tuple(_cited(ep.unit_ids, units))
            start = _clamp(_parse(ep.start, scope, lo), lo, hi)
            end = max(start, _clamp(_parse(ep.end, scope, hi, end=True), lo, hi))
            # One episode was written from all the units; several split them by what each cites.
            covers = ids if len(answers) > 1 and ids else tuple(u.id for u in units)
            drafts.append(EpisodeDraft(ep.text.strip(), start, end, source_ids=ids, covers_ids=covers))
        return drafts

    async def facts(
        self, scope: Scope, episode: EpisodeDraft, units: Sequence[Source], related: Sequence[Memory]
    ) -> list[FactDraft]:
        known_related = "\n".join(f"[{m.memory_id}] {m.text}" for m in related) or "(none)"
        out = await self._ask(
            "facts", scope, FACTS, episode=episode.text, units=render(units, scope), related=known_related
        )
        related_ids = {m.memory_id for m in related}
        lo, hi = _span(units, None)
        drafts = []
        for f in out.facts:
            valid_from = _parse(f.valid_from, scope, lo)
            valid_to = _parse(f.valid_to, scope, hi, end=True) if f.valid_to else None
            drafts.append(
                FactDraft(
                    sentence=f.sentence.strip(),
                    triple=Triple(subject=f.subject, predicate=f.predicate, object=f.object),
                    fact_type=f.type,
                    valid_from=valid_from,
                    valid_to=valid_to if valid_to is None or valid_to >= valid_from else None,
                    source_ids=tuple(_cited(f.unit_ids, units)),
                    supersedes=tuple(i for i in f.supersedes if i in related_ids),
                )
            )
        return drafts

    async def summary(self, scope: Scope, request: SummaryRequest) -> Written:
        # request.said is not sent: the model reads the children, a prompt of their size
        children = request.children
        out = await self._ask(
            "summary",
            scope,
            SUMMARY,
            instruction=LEVEL_INSTRUCTIONS[request.kind.value],
            period=_period(request.start, request.end, scope),
            history="\n\n".join(h.text for h in request.history) or "(none)",
            children=render(children, scope),
        )
        return _written(out.summary, out.source_ids, children)

    async def profile(self, scope: Scope, request: ProfileRequest) -> Written:
        # request.said is not sent: the model reads traits from the weeks' third person
        start, children, previous = request.start, request.children, request.previous
        out = await self._ask(
            "profile",
            scope,
            PROFILE,
            period=start.astimezone(scope.zone).strftime("%B %Y"),
            previous=render([previous], scope) if previous else "(none yet)",
            children=render(children, scope),
        )
        return _written(out.profile, out.source_ids, [*children, *([previous] if previous else [])])

    async def durative(
        self, scope: Scope, month: datetime, cluster: Sequence[Source]
    ) -> tuple[Written, Written]:
        out = await self._ask(
            "durative",
            scope,
            DURATIVE,
            period=month.astimezone(scope.zone).strftime("%B %Y"),
            facts=render(cluster, scope),
        )
        return _written(out.topic, out.topic_ids, cluster), _written(out.persona, out.persona_ids, cluster)


def _cited(ids: Sequence[str], sources: Sequence[Source]) -> list[str]:
    """The cited ids that name one of ``sources``, once each, in citation order."""
    known = {s.id for s in sources}
    return list(dict.fromkeys(i for i in ids if i in known))


def _written(text: str, cited: Sequence[str], sources: Sequence[Source]) -> Written:
    """The model's text with the turns of the sources it cited (a cited memory: the turns its own
    text carries)."""
    by_id = {s.id: s for s in sources}
    turns = (t for i in _cited(cited, sources) for t in by_id[i].turn_ids)
    return Written(text.strip(), tuple(dict.fromkeys(turns)))


def render(sources: Sequence[Source], scope: Scope) -> str:
    """One dated, id-tagged block per source, with its resolved time expressions, so the model can
    anchor every relative date."""
    blocks = []
    for s in sources:
        when = s.ts.astimezone(scope.zone).strftime("%Y-%m-%d %H:%M (%A)")
        times = "; ".join(f"'{et.expression}' = {_period(et.start, et.end, scope)}" for et in s.event_times)
        # The text's lines made plain: a line of stored text cannot open a block of its own.
        blocks.append(f"[{s.id}] {when}\n{plain_lines(s.text)}" + (f"\n(times: {times})" if times else ""))
    return "\n\n".join(blocks) or "(none)"


def _period(start: datetime, end: datetime | None, scope: Scope) -> str:
    first = start.astimezone(scope.zone).date()
    last = (end - timedelta(microseconds=1)).astimezone(scope.zone).date() if end and end > start else first
    return first.isoformat() if first == last else f"{first.isoformat()} to {last.isoformat()}"


def _span(units: Sequence[Source], extra: Source | None) -> tuple[datetime, datetime]:
    points = [u.ts for u in units] + [t for u in units for et in u.event_times for t in (et.start, et.end)]
    if extra is not None:
        points += [t for t in (extra.start, extra.end, extra.ts) if t is not None]
    return min(points), max(points)


def _parse(value: str | None, scope: Scope, fallback: datetime, *, end: bool = False) -> datetime:
    """An ISO date or datetime from the model, in the user's zone; the fallback when unreadable."""
    if not value:
        return fallback
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        try:
            day = date.fromisoformat(value.strip()[:10])
        except ValueError:
            return fallback
        parsed = datetime.combine(day + timedelta(days=1) if end else day, time())
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=scope.zone)


def _clamp(value: datetime, lo: datetime, hi: datetime) -> datetime:
    # An episode is about its sources' time: a model's stray date must not move it elsewhere.
    return min(max(value, lo - timedelta(days=366)), hi + timedelta(days=366))

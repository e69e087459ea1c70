"""Episodes: a consolidation request's units as 1-3 narratives of their most central sentences."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from memstream.consumers.extractive.centrality import in_time_order, rank, select, substantive
from memstream.consumers.extractive.rendering import narrate
from memstream.consumers.extractive.sentences import (
    Sentence,
    canonical,
    memory_sentences,
    provenance,
    sentence_key,
    sentences,
)
from memstream.consumers.writer import EpisodeDraft, Scope, Source

EPISODE_GAP = timedelta(days=7)  # units further apart than this belong to different episodes
MAX_EPISODES = 3
EPISODE_SENTENCES = 6
EPISODE_WORDS = 120
MERGED_MAX_CHARS = 1_500  # a merged episode stops growing here (its newest least central sentences go)


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
    pool = substantive(sentences(group, zone))
    if not pool:
        return None  # small talk only: no episode
    chosen = in_time_order(select(rank(pool), EPISODE_SENTENCES, EPISODE_WORDS))
    start, end = _span(group, zone)
    written = provenance(narrate(chosen, zone), chosen, zone)
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
    as fit in MERGED_MAX_CHARS (at least one, so the new units are represented, unless they are
    small talk only)."""
    kept = memory_sentences(existing, 0, zone)
    said = frozenset(sentence_key(s) for s in kept)
    base = existing.text.rstrip()
    chosen: list[Sentence] = []
    for s in select(rank(substantive(sentences(units, zone))), EPISODE_SENTENCES, skip=said):
        trial = in_time_order([*chosen, s])
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
        sentence_turn_ids=provenance(text, [*kept, *chosen], zone).sentence_turn_ids,
    )


def episodes(scope: Scope, units: Sequence[Source], merge_into: Source | None) -> list[EpisodeDraft]:
    """Up to 3 episodes of ``units`` (split at long gaps in dialogue time), each its most central
    sentences in time order (a group of small talk only makes none); with ``merge_into``, exactly
    one: that episode extended."""
    ordered = canonical(units)
    if not ordered:
        return []
    if merge_into is not None:
        return [_merge(ordered, merge_into, scope.zone)]
    drafts = (_episode(group, scope.zone) for group in _time_groups(ordered))
    return [d for d in drafts if d is not None]

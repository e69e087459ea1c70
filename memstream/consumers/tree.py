"""The Temporal Memory Tree summarizer (TiMem), and durative memory (TSM) when a month closes.

A ``WindowClosed`` in, the user's new tree state and memory updates out; the pure state machine
is ``memstream.core.tree``. Cost control: a parent with a single child (a day with one session, a
week with one day) reuses the child's text instead of asking the writer to restate it.

Closing a session also writes its observations (``memstream.consumers.extractive.observations``): level-1
memories, one per turn that says something, in the third person, dated by their ``start`` (the turn's time).
Their id is the speaker and the words said, so the same thing said again rewrites one memory ("... (again
10 July 2022)."), and a redelivered window rewrites the same ones. They are extractive whichever writer
writes the tree.

Provenance: a node's ``source_turn_ids`` are the turns its own text carries (what the writer says
it quoted or cited), its ``covers_turn_ids`` every turn below it (its children's).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from zoneinfo import ZoneInfo

from memstream.consumers.extractive.observations import ObservationDraft, observations
from memstream.consumers.extractive.summaries import retitled
from memstream.consumers.extractive.writer import WRITER_NAME
from memstream.consumers.writer import (
    ProfileRequest,
    Scope,
    Source,
    SummaryRequest,
    Writer,
    Written,
    memory_source,
    stamp,
    stamp_of,
    unit_source,
)
from memstream.core import durative
from memstream.core.dates import render_date
from memstream.core.embedder import Embedder, embed_missing
from memstream.core.memories import MEMORIES, in_period, memory_from_payload, stored_vectors, union, upsert
from memstream.core.store import Filter, Range, VectorStore, scroll_all
from memstream.core.tree import TreeState, apply, hull, plan
from memstream.core.units import UNITS, USER_FIELD, unit_from_payload
from memstream.schemas.events import Unit, WindowClosed
from memstream.schemas.memory import LEVEL, Memory, MemoryKind, MemoryUpdate, memory_id


class TreeSummarizer:
    def __init__(self, embedder: Embedder, writer: Writer, observation_budget: float) -> None:
        self.embedder = embedder
        self.writer = writer
        self.observation_budget = observation_budget  # share of a session's raw tokens its observations take
        # One thread, as the extractive writer's: many users' sessions close at once, and their CPU work
        # must leave the other cores to ingest and recall (consumers/extractive/writer.py).
        self._cpu = ThreadPoolExecutor(max_workers=1, thread_name_prefix="observations")

    async def handle(
        self, store: VectorStore, state: TreeState, window: WindowClosed
    ) -> tuple[TreeState, list[MemoryUpdate]]:
        p = plan(state, window)
        if p is None:
            return state, []
        scope = Scope(window.tenant, window.user_id, ZoneInfo(window.timezone))
        history = [memory_source(h) for h in p.history]
        stage = "summary"
        if p.kind == MemoryKind.SESSION:
            units = session_units(store, window)
            if not units:
                return state, []
            children: list[Source] = [unit_source(u) for u in units]
            child_ids = [u.unit_id for u in units]
            covers = [u.turn_id for u in units]
            intervals: list[tuple[datetime, datetime | None]] = [(u.ts, u.ts) for u in units]
            written = await self.writer.summary(
                scope, SummaryRequest(p.kind, window.start, window.end, children, history)
            )
        else:
            if not p.children:  # nothing below it was summarised (e.g. only late turns that day)
                return state, []
            children = [memory_source(c) for c in p.children]
            child_ids = [c.memory_id for c in p.children]
            covers = union(*(c.covers_turn_ids for c in p.children))
            intervals = [(c.start, c.end) for c in p.children]
            if p.kind == MemoryKind.PROFILE:
                stage = "profile"
                previous = memory_source(p.previous) if p.previous else None
                said = [unit_source(u) for u in units_below(store, window, p.children)]
                written = await self.writer.profile(
                    scope, ProfileRequest(window.start, window.end, children, previous, said)
                )
            elif len(p.children) == 1:
                stage = "passthrough"
                only = children[0]
                text = retitled(only.text, p.kind, window.start, scope.zone)
                written = Written(text, only.turn_ids, only.sentence_turn_ids)
            else:
                said = [unit_source(u) for u in units_below(store, window, p.children)]
                written = await self.writer.summary(
                    scope, SummaryRequest(p.kind, window.start, window.end, children, history, said)
                )
        start, end = hull(window.start, window.end, intervals)
        single = p.children[0] if stage == "passthrough" else None
        node = Memory(
            memory_id=p.node_id,
            tenant=window.tenant,
            user_id=window.user_id,
            kind=p.kind,
            level=LEVEL[p.kind],
            text=written.text,
            start=start,
            end=end,
            recorded_at=window.last_ts,
            source_turn_ids=list(written.turn_ids),
            # A profile carries lines of the previous one, from before its own subtree.
            covers_turn_ids=union(covers, written.turn_ids),
            sentence_turn_ids=[list(t) for t in written.sentence_turn_ids],
            children=child_ids,
            window_id=window.window_id,
            **(stamp_of(single) if single else stamp(self.writer, stage)),
        )
        state, linked = apply(state, window, node, p.children)
        observed = (
            await self._observations(store, scope, window, units) if p.kind == MemoryKind.SESSION else []
        )
        return state, [upsert(node), *(upsert(c) for c in linked), *(upsert(o) for o in observed)]

    async def _observations(
        self, store: VectorStore, scope: Scope, window: WindowClosed, units: Sequence[Unit]
    ) -> list[Memory]:
        """The session's observations, each merged into the one said before with the same words."""
        sources = [unit_source(u) for u in units]
        drafts = await asyncio.get_running_loop().run_in_executor(
            self._cpu, partial(observations, scope, sources, self.observation_budget)
        )
        ids = [memory_id(MemoryKind.OBSERVATION.value, window.key, d.key) for d in drafts]
        existing = {
            m.memory_id: m for m in (memory_from_payload(h.payload) for h in store.retrieve(MEMORIES, ids))
        }
        return observation_memories(window, drafts, ids, existing, scope.zone)

    async def durative(self, store: VectorStore, window: WindowClosed) -> list[MemoryUpdate]:
        """One topic and one persona memory per cluster of a closed month's facts (TSM). The
        app runs it a while after the month closed, so the month's last facts have landed."""
        scope = Scope(window.tenant, window.user_id, ZoneInfo(window.timezone))
        key = window.key
        facts = sorted(
            (
                memory_from_payload(h.payload)
                for h in scroll_all(
                    store, MEMORIES, in_period(key, MemoryKind.FACT, window.start, window.end)
                )
            ),
            key=lambda m: (m.start, m.memory_id),
        )
        if not facts:
            return []
        # The indexer stored each fact with its text's vector.
        texts = [f.text for f in facts]
        stored = stored_vectors(store, [f.memory_id for f in facts], texts)
        vectors = await asyncio.to_thread(embed_missing, self.embedder, texts, stored)
        labels = durative.cluster(vectors)
        month = window.start.astimezone(scope.zone).strftime("%Y-%m")
        updates: list[MemoryUpdate] = []
        for label in sorted(set(labels)):
            members = [f for f, lab in zip(facts, labels, strict=True) if lab == label]
            topic, persona = await self.writer.durative(
                scope, window.start, [memory_source(m) for m in members]
            )
            covers = union(*(m.covers_turn_ids for m in members))
            for kind, written in ((MemoryKind.TOPIC, topic), (MemoryKind.PERSONA, persona)):
                updates.append(
                    upsert(
                        Memory(
                            memory_id=memory_id(kind.value, key, month, str(label)),
                            tenant=window.tenant,
                            user_id=window.user_id,
                            kind=kind,
                            level=LEVEL[kind],
                            text=written.text,
                            start=window.start,
                            end=window.end,
                            recorded_at=window.last_ts,
                            source_turn_ids=list(written.turn_ids),
                            covers_turn_ids=union(covers, written.turn_ids),
                            sentence_turn_ids=[list(t) for t in written.sentence_turn_ids],
                            children=[m.memory_id for m in members],
                            window_id=window.window_id,
                            **stamp(self.writer, "durative"),
                        )
                    )
                )
        return updates


def observation_memories(
    window: WindowClosed,
    drafts: Sequence[ObservationDraft],
    ids: Sequence[str],
    existing: Mapping[str, Memory],
    zone: ZoneInfo,
) -> list[Memory]:
    """The memories of ``drafts`` (with ids ``ids``): a draft of a memory already written (stored, or
    earlier in this session) from other turns is said again: that memory keeps its text and start, gains
    the turns, and notes the day when it is another; from the same turns it is redelivered: unchanged."""
    out: dict[str, Memory] = {}
    for mid, draft in zip(ids, drafts, strict=True):
        first = out.get(mid) or existing.get(mid)
        if first is None or draft.said < first.start:  # new (or replayed before what was written)
            out[mid] = _observation(window, mid, draft)
        elif set(draft.turn_ids) <= set(first.source_turn_ids):
            out[mid] = first
        else:
            out[mid] = _again(first, draft, zone)
    return list(out.values())


def _observation(window: WindowClosed, mid: str, draft: ObservationDraft) -> Memory:
    return Memory(
        memory_id=mid,
        tenant=window.tenant,
        user_id=window.user_id,
        kind=MemoryKind.OBSERVATION,
        level=LEVEL[MemoryKind.OBSERVATION],
        text=draft.text,
        start=draft.said,
        end=draft.said,
        recorded_at=draft.said,
        source_turn_ids=list(draft.turn_ids),
        covers_turn_ids=list(draft.turn_ids),
        source_unit_ids=list(draft.source_ids),
        window_id=window.window_id,
        extractive=True,
        writer=WRITER_NAME,
        model=None,
    )


_AGAIN = re.compile(r"(?: \(again [^()]*\))?\.$")


def _again(first: Memory, draft: ObservationDraft, zone: ZoneInfo) -> Memory:
    """``first`` said again at ``draft.said``: "Nate has turtles (again 10 July 2022)." (the latest day only;
    the first is the memory's ``start``)."""
    turns = union(first.source_turn_ids, draft.turn_ids)
    same_day = render_date(draft.said, zone) == render_date(first.start, zone)
    text = first.text if same_day else _AGAIN.sub(f" (again {render_date(draft.said, zone)}).", first.text)
    return first.model_copy(
        update={
            "text": text,
            "recorded_at": max(first.recorded_at, draft.said),
            "source_turn_ids": turns,
            "covers_turn_ids": union(first.covers_turn_ids, turns),
            "source_unit_ids": union(first.source_unit_ids, draft.source_ids),
        }
    )


def units_below(store: VectorStore, window: WindowClosed, children: Sequence[Memory]) -> list[Unit]:
    """The units of the turns under ``children`` (what a day, week or month node covers), in time
    order: a writer tells what was said from them rather than from its children's summaries."""
    covered = set(union(*(c.covers_turn_ids for c in children)))
    if not covered:
        return []
    start, end = hull(window.start, window.end, [(c.start, c.end) for c in children])
    flt = Filter(
        equals={USER_FIELD: window.key},
        ranges={"ts_epoch": Range(gte=start.timestamp(), lt=end.timestamp() + 1e-3)},
    )
    units = [unit_from_payload(h.payload) for h in scroll_all(store, UNITS, flt)]
    return sorted((u for u in units if u.turn_id in covered), key=lambda u: (u.ts, u.unit_id))


def session_units(store: VectorStore, window: WindowClosed) -> list[Unit]:
    """The units of a closed session, in time order."""
    flt = Filter(
        equals={USER_FIELD: window.key},
        ranges={"ts_epoch": Range(gte=window.first_ts.timestamp(), lt=window.last_ts.timestamp() + 1e-3)},
    )
    units = [unit_from_payload(h.payload) for h in scroll_all(store, UNITS, flt)]
    return sorted((u for u in units if u.session_id == window.session_id), key=lambda u: (u.ts, u.unit_id))

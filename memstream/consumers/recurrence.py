"""The recurrence consolidator (RecMem §3.3-3.4): a ConsolidationRequest in, memory updates out.

1. load the cluster's units in time order; units of small talk only ("Coffee time here.") make
   nothing, and cost no writer call (consumers/extractive/centrality.py, ``substantive``);
2. merge-first: if the user's nearest current episode has cosine >= theta_sim with the cluster's
   centroid, the units are folded into it (same memory id); otherwise 1-3 new episodes;
3. semantic refinement: per episode, the facts it compressed away, given the user's related
   current facts; an equivalent fact gets the same id (uuid5 of user, triple and start day), so it
   is never stored twice; a time-anchored update invalidates the facts it supersedes.

It only reads the store; the indexer applies the updates it returns, a little later. The app
has a user's earlier updates indexed before it hands over the next request (streams/read_your_writes.py),
so the store shows the newest version of every episode. A request already folded into memory (its
id is on an episode) is skipped, so redelivery changes nothing.
"""

from __future__ import annotations

import asyncio
from zoneinfo import ZoneInfo

import numpy as np

from memstream.consumers.extractive import sentences, substantive
from memstream.consumers.writer import EpisodeDraft, Scope, Source, Writer, memory_source, stamp, unit_source
from memstream.core.embedder import Embedder, embed_missing
from memstream.core.memories import MEMORIES, current_of_user, nearest, union, upsert
from memstream.core.store import Filter, VectorStore
from memstream.core.units import UNITS, USER_FIELD, unit_from_payload
from memstream.schemas.events import ConsolidationRequest, Unit
from memstream.schemas.memory import LEVEL, Memory, MemoryKind, MemoryOp, MemoryUpdate, memory_id

RELATED_FACTS = 10  # current facts shown to the writer for de-duplication and supersession


class RecurrenceConsolidator:
    def __init__(self, embedder: Embedder, writer: Writer, theta_sim: float) -> None:
        self.embedder = embedder
        self.writer = writer
        self.theta_sim = theta_sim

    async def handle(self, store: VectorStore, req: ConsolidationRequest) -> list[MemoryUpdate]:
        applied = Filter(equals={USER_FIELD: req.key, "request_ids": req.request_id})
        if store.count(MEMORIES, applied):
            return []
        # With their stored vectors: ingest embedded exactly these texts, so they need no embedding again.
        found = sorted(
            (
                (unit_from_payload(h.payload), h.vector)
                for h in store.retrieve(UNITS, req.unit_ids, with_vectors=True)
            ),
            key=lambda pair: (pair[0].ts, pair[0].unit_id),
        )
        if not found:  # the user was forgotten in the meantime
            return []
        units = [u for u, _ in found]
        scope = Scope(req.tenant, req.user_id, ZoneInfo(units[-1].timezone))
        sources = [unit_source(u) for u in units]
        if not substantive(sentences(sources, scope.zone)):
            return []  # nothing to remember: no LLM tokens spent on pleasantries
        stored = [v for _, v in found]
        vectors = await asyncio.to_thread(embed_missing, self.embedder, [u.text for u in units], stored)
        centroid = _normalized(vectors.mean(axis=0))
        near = nearest(store, centroid, current_of_user(req.key, MemoryKind.EPISODE), 1)
        merge = near[0][1] if near and near[0][0] >= self.theta_sim else None

        drafts = await self.writer.episodes(scope, sources, memory_source(merge) if merge else None)
        updates: list[MemoryUpdate] = []
        for i, draft in enumerate(drafts):
            episode = self._episode(req, units, draft, merge, i)
            updates.append(upsert(episode))
            updates += await self._facts(store, scope, req, units, sources, draft, episode)
        return updates

    def _episode(
        self, req: ConsolidationRequest, units: list[Unit], draft: EpisodeDraft, merge: Memory | None, i: int
    ) -> Memory:
        turn_of = {u.unit_id: u.turn_id for u in units}
        source = [turn_of[i] for i in draft.source_ids if i in turn_of]
        covers = [turn_of[i] for i in draft.covers_ids if i in turn_of]
        start, end = draft.start, draft.end
        if merge is not None:
            start, end = min(start, merge.start), max(end, merge.end or merge.start)
        return Memory(
            memory_id=merge.memory_id if merge else memory_id("episode", req.request_id, str(i)),
            tenant=req.tenant,
            user_id=req.user_id,
            kind=MemoryKind.EPISODE,
            level=LEVEL[MemoryKind.EPISODE],
            text=draft.text,
            start=start,
            end=end,
            recorded_at=units[-1].ts,
            # A merge keeps what the episode said: its turns stay, the units it adds join them.
            source_turn_ids=union(merge.source_turn_ids if merge else [], source),
            covers_turn_ids=union(merge.covers_turn_ids if merge else [], covers, source),
            sentence_turn_ids=[list(t) for t in draft.sentence_turn_ids],
            source_unit_ids=union(merge.source_unit_ids if merge else [], draft.source_ids),
            request_ids=union(merge.request_ids if merge else [], [req.request_id]),
            **stamp(self.writer, "merge" if merge else "episodes"),
        )

    async def _facts(
        self,
        store: VectorStore,
        scope: Scope,
        req: ConsolidationRequest,
        units: list[Unit],
        sources: list[Source],
        draft: EpisodeDraft,
        episode: Memory,
    ) -> list[MemoryUpdate]:
        vector = (await asyncio.to_thread(self.embedder.embed, [draft.text]))[0]
        related = [
            m for _, m in nearest(store, vector, current_of_user(req.key, MemoryKind.FACT), RELATED_FACTS)
        ]
        mine = [s for s in sources if s.id in draft.covers_ids] or sources
        turn_of = {u.unit_id: u.turn_id for u in units}
        updates: list[MemoryUpdate] = []
        for f in await self.writer.facts(scope, draft, mine, related):
            stated = [turn_of[i] for i in f.source_ids if i in turn_of]
            fid = memory_id("fact", req.key, f.triple.normalized(), f.valid_from.date().isoformat())
            fact = Memory(
                memory_id=fid,
                tenant=req.tenant,
                user_id=req.user_id,
                kind=MemoryKind.FACT,
                level=LEVEL[MemoryKind.FACT],
                text=f.sentence,
                start=f.valid_from,
                end=f.valid_to,
                recorded_at=episode.recorded_at,
                source_turn_ids=stated,
                # A fact covers what it states; one the model cited nothing for, the units it read.
                covers_turn_ids=stated or [turn_of[s.id] for s in mine if s.id in turn_of],
                source_unit_ids=list(f.source_ids),
                parent_id=episode.memory_id,
                triple=f.triple,
                fact_type=f.fact_type,
                request_ids=[req.request_id],
                **stamp(self.writer, "facts"),
            )
            updates.append(upsert(fact))
            updates += [
                MemoryUpdate(
                    op=MemoryOp.INVALIDATE,
                    memory_id=old,
                    tenant=req.tenant,
                    user_id=req.user_id,
                    valid_to=f.valid_from,
                    expired_at=episode.recorded_at,
                    superseded_by=fid,
                )
                for old in f.supersedes
                if old != fid
            ]
        return updates


def _normalized(v: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(v))
    return (v / norm if norm else v).astype(np.float32)

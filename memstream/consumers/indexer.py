"""The indexer: the single writer of the ``memories`` collection, a view of ``memory.updates``.

Idempotent: ids are the memories' own deterministic ids, an upsert rewrites the same point, an
invalidate of an already invalidated memory rewrites the same values, a delete of a missing one
does nothing. Replaying the topic from the start (``memstream reindex``) rebuilds the collection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from memstream.core.embedder import Embedder, embed_missing
from memstream.core.memories import (
    CURRENT_FIELD,
    ID_FIELD,
    MEMORIES,
    MEMORY_FIELD,
    memory_from_payload,
    memory_payload,
    stored_vectors,
)
from memstream.core.store import Filter, Point, VectorStore
from memstream.schemas.memory import MemoryOp, MemoryUpdate

# Whether an update may still be written (a deleted user's may not).
Keep = Callable[[MemoryUpdate], bool]


class Indexer:
    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    async def apply(
        self, store: VectorStore, updates: Sequence[MemoryUpdate], keep: Keep = lambda _: True
    ) -> None:
        """Apply in order; consecutive upserts are embedded and written as one batch.

        ``keep`` is asked right before each write, with nothing awaited in between: a user erased
        while an embedding ran (streams/handlers.py, Forgetting) gets none of it written back."""
        run: list[MemoryUpdate] = []
        for update in updates:
            if update.op == MemoryOp.UPSERT:
                run.append(update)
                continue
            await self._upsert(store, run, keep)
            run = []
            if not keep(update):
                continue
            if update.op == MemoryOp.INVALIDATE:
                self._invalidate(store, update)
            else:
                store.delete(MEMORIES, Filter(equals={ID_FIELD: update.memory_id}))
        await self._upsert(store, run, keep)

    async def _upsert(self, store: VectorStore, run: list[MemoryUpdate], keep: Keep) -> None:
        # The last upsert of an id in the run wins, as it would applied one by one.
        last = {u.memory_id: u for u in run if u.memory is not None}
        memories = [u.memory for u in last.values() if u.memory is not None and keep(u)]
        if not memories:
            return
        # A memory whose text is what the store holds keeps its vector: only its payload is
        # rewritten. Tree nodes come back when their parent is built (same text, the parent's id
        # added): half the tree's upserts on the sample set, and the longest texts to embed.
        stored = {
            h.id: h.payload.get("text") for h in store.retrieve(MEMORIES, [m.memory_id for m in memories])
        }
        fresh = []
        for m in memories:
            if stored.get(m.memory_id) == m.text:
                store.set_payload(MEMORIES, [m.memory_id], memory_payload(m))
            else:
                fresh.append(m)
        if not fresh:
            return
        # A node that restates its only child (a tree passthrough: a day of one session, a week of one
        # day) has the child's text, so the child's stored vector, unless it took a header of its own
        # (the extractive writer's): only the others are embedded.
        only_child = [m.children[0] if len(m.children) == 1 else None for m in fresh]
        texts = [m.text for m in fresh]
        reused = stored_vectors(store, only_child, texts)
        vectors = await asyncio.to_thread(embed_missing, self.embedder, texts, reused)
        points = [
            Point(m.memory_id, v, memory_payload(m))
            for m, v in zip(fresh, vectors, strict=True)
            if keep(last[m.memory_id])
        ]
        if points:
            store.upsert(MEMORIES, points)

    def _invalidate(self, store: VectorStore, update: MemoryUpdate) -> None:
        found = store.retrieve(MEMORIES, [update.memory_id])
        if not found:
            return  # superseded before it was indexed here, or forgotten: nothing to mark
        memory = memory_from_payload(found[0].payload)
        end = memory.end if memory.end is not None and update.valid_to is None else update.valid_to
        if end is not None and end < memory.start:
            end = memory.start
        memory = memory.model_copy(
            update={"end": end, "expired_at": update.expired_at, "superseded_by": update.superseded_by}
        )
        payload = memory_payload(memory)
        store.set_payload(
            MEMORIES,
            [memory.memory_id],
            {CURRENT_FIELD: 0, MEMORY_FIELD: payload[MEMORY_FIELD], "end_epoch": payload["end_epoch"]},
        )

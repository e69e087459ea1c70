"""Recall over one user's store: the thin shell that fetches candidates and their ancestors for ``rank``.

Per call: three batched searches (units dense + BM25; the units' view points by context and by
sentences; episodes, facts and, when tree levels are asked, sessions), then for those at most
``config.max_session_lookups`` session lookups and one read per tree level above; the steps:
docs/recall.md.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt
import orjson

from memstream.core import lexical
from memstream.core.embedder import Embedder
from memstream.core.memories import KIND_FIELD, MEMORIES, MEMORY_FIELD
from memstream.core.recall import rank, speakers
from memstream.core.recall.config import DEFAULT, RecallConfig
from memstream.core.recall.time_intent import TimeIntent, contains, distance, parse_time_intent
from memstream.core.sentences import is_small_talk
from memstream.core.store import Filter, Hit, SearchQuery, VectorStore
from memstream.core.unit_views import SENTENCES, UNIT_VIEWS, sentence_texts
from memstream.core.units import UNIT_FIELD, UNITS, USER_FIELD
from memstream.schemas.memory import Memory, MemoryKind

LEAF_KINDS = (MemoryKind.EPISODE, MemoryKind.FACT)


@dataclass(frozen=True, eq=False)
class Ask:
    """What a recall is asked: whose memory, the query, when it is asked (aware; a naive one is taken in
    ``zone``), the token budget, the zone that dates are rendered in (an IANA name), only these levels
    (None: ``config.levels``), and the query already embedded (None: :func:`recall` embeds it)."""

    user_key: str
    query: str
    now: datetime
    budget_tokens: int = 1000
    zone: str = "UTC"
    levels: tuple[int, ...] | None = None
    vector: npt.NDArray[np.float32] | None = None


@dataclass(frozen=True)
class Recalled:
    items: list[rank.Scored]  # in presentation order
    context: str
    intent: TimeIntent
    complexity: rank.Complexity


def recall(store: VectorStore, embedder: Embedder, ask: Ask, config: RecallConfig = DEFAULT) -> Recalled:
    """The way in to recall, wherever it runs (the gateway on a Qdrant server, the worker that holds an
    embedded store, the eval): the user's memories for ``ask.query`` asked at ``ask.now``; their rendered
    ``context`` is at most ``ask.budget_tokens`` tokens as ``rank.tokens`` counts them (characters / 4,
    rounded up).

    ``ask.levels``: only items of these levels (1 leaves, 2 sessions, 3 days, 4 weeks, 5 profiles, topics
    and personas) are returned, and they get the whole budget; None = ``config.levels``. Phatic units
    (``rank.phatic``) are never returned; ``config``: the tunables (``config.DEFAULT``). ``ask.vector``: the
    query already embedded (by ``embedder``'s model), so ``embedder`` is not asked; the gateway embeds
    and the worker that holds the store recalls (``memstream.core.recall.wire`` carries the ask)."""
    user_key, query, budget_tokens, levels = ask.user_key, ask.query, ask.budget_tokens, ask.levels
    zone = ZoneInfo(ask.zone)
    now = ask.now if ask.now.tzinfo else ask.now.replace(tzinfo=zone)
    intent = parse_time_intent(query, now)
    complexity = rank.plan_complexity(query, bool(intent.intervals))
    vector = embedder.embed([query])[0] if ask.vector is None else ask.vector

    wanted = frozenset(config.levels if levels is None else levels)
    # The tree above the leaves only matters when one of its levels may be returned: with leaves alone
    # (the default), its nodes would be looked up for nothing (select keeps no node of a level not asked).
    tree = any(level > rank.LEAF_LEVEL for level in wanted)
    leaves, sessions, words, searched, named = _candidates(
        store, embedder, vector, query, user_key, config, sessions=tree
    )
    # Superseded facts only for questions about change; an event fact is not "invalid" because it
    # ended, so no point-in-time filter here: the selection puts the asked interval first.
    scored = rank.keep_valid(
        list(zip(leaves, rank.leaf_scores(leaves, words, config.lam, config.stemmed), strict=True)),
        intent.asks_change,
        None,
    )
    smoothed = rank.smooth_neighbours(scored, config.neighbour_weight)
    # The mass from the leaf scores: a smoothed score counts a strong turn again in each of its neighbours
    # (from the smoothed ones, multi-hop and answer recall fell: bench/RESULTS.md).
    lifted = rank.lift_sessions(
        smoothed, rank.session_mass(scored, config.session_depth), config.session_weight
    )
    weighed = rank.weigh_turns(lifted, named, config.speaker_weight, config.question_weight)
    # Phatic turns, and turns that only ask, still lifted their neighbours.
    scored = rank.drop_phatic(weighed, config.min_content_words)
    activated = {item.id for item, _ in rank.top(scored, config.activated)}
    if config.briefs:  # of the activated units only: the others hardly reach select's queue
        units = [item.id for item, _ in scored if item.id in activated and item.kind == "unit"]
        slots = _nearest_sentences(store, searched, units)
        scored = [(_with_brief(item, slots) if item.id in activated else item, s) for item, s in scored]
    if config.condense:  # scored on what was said, returned without its small talk
        scored = [(rank.condensed(item), score) for item, score in scored]
    by_id: dict[str, rank.Item] = {}
    linked = scored
    if tree:
        leaves_up = [i for i, _ in scored if i.id in activated]
        by_id, session_of = _ancestors(store, user_key, leaves_up, sessions, config.max_session_lookups)
        linked = [(_with_parent(item, session_of) if item.id in activated else item, s) for item, s in scored]

    def closeness(item: rank.Item) -> float:
        return distance(intent, item.start, item.end)

    selected = rank.select(
        linked,
        by_id,
        budget_tokens,
        inside=lambda i: contains(intent, i.start, i.end),
        levels=wanted,
        activated=config.activated,
        level_decay=config.level_decay,
        contained=config.contained,
        zone=zone,
        covered=config.covered,
        briefs=config.briefs,
    )
    ordered = rank.order(selected, closeness)
    return Recalled(ordered, rank.render_context(ordered, zone), intent, complexity)


def _unit_cosines(
    store: VectorStore,
    vector: npt.NDArray[np.float32],
    user_key: str,
    hits: Sequence[Hit],
    config: RecallConfig,
) -> list[float]:
    """The units' dense scores: their whole-turn cosines (``hits``) mixed with their best sentence's and
    their context vector's (``memstream.core.unit_views``), from one batch of two searches of the user's
    view points, by context vector and by sentence multivector (ids only: a view point's id is its
    unit's). A unit that a search did not return takes that search's lowest cosine, an upper bound of its
    own; when fewer came back than were asked every view point did, and a unit without one (stored
    before views existed) keeps its whole-turn cosine."""
    if not (config.sentence_weight or config.context_weight) or not hits:
        return [h.score for h in hits]
    mine = Filter(equals={USER_FIELD: user_key})
    limit = config.view_candidates
    by_context, by_sentence = store.search_many(
        UNIT_VIEWS,
        [
            SearchQuery(vector, limit, mine, with_payload=False),
            SearchQuery(vector, limit, mine, with_payload=False, using=SENTENCES),
        ],
    )
    contexts, context_floor = _scores(by_context, limit)
    sentences, sentence_floor = _scores(by_sentence, limit)
    out = []
    for h in hits:
        sentence = sentences.get(h.id, sentence_floor)
        context = contexts.get(h.id, context_floor)
        out.append(
            config.turn_weight * h.score
            + config.sentence_weight * (h.score if sentence is None else sentence)
            + config.context_weight * (h.score if context is None else context)
        )
    return out


def _scores(found: Sequence[Hit], limit: int) -> tuple[dict[str, float], float | None]:
    """Each hit's cosine by id, and the lowest one when the search may have left points out (``limit``
    came back), else None."""
    return {h.id: h.score for h in found}, found[-1].score if len(found) >= limit else None


def _nearest_sentences(
    store: VectorStore, vector: npt.NDArray[np.float32], units: Sequence[str]
) -> dict[str, int]:
    """The slot (from 1, in ``sentence_texts`` order) of each unit's sentence nearest ``vector``, from the
    rows of its view point's sentence multivector: exact, so it does not depend on how the store was
    written. Units without a view point are left out."""
    if not units:
        return {}
    stored = store.retrieve(UNIT_VIEWS, units, with_vectors=True)
    return {h.id: int(np.argmax(h.multi @ vector)) + 1 for h in stored if h.multi is not None}


def _candidates(
    store: VectorStore,
    embedder: Embedder,
    vector: npt.NDArray[np.float32],
    query: str,
    user_key: str,
    config: RecallConfig,
    sessions: bool = True,
) -> tuple[list[rank.Item], list[rank.Item], str, npt.NDArray[np.float32], list[str]]:
    """The leaves nearest the query (units, episodes, facts; units also by BM25), when ``sessions``
    the session nodes nearest it, the query's words for BM25, and the vector they were searched with
    (the query's, or its mix with the query without the speakers' names). Every candidate carries its
    cosine: the store rescores the lexical ones densely.

    A query that names speakers of the units found (``speakers.named_speakers``) is searched again,
    with its vector mixed with that of the query without the names (``speakers.mix``), its words
    without them; the other searches use that mix. One more embedding and one more search, for such
    queries only. Last, the speakers the query names (``rank.weigh_turns`` reads them)."""
    mine = Filter(equals={USER_FIELD: user_key})

    def search_units(vector: npt.NDArray[np.float32], words: str) -> list[Hit]:
        units_query = SearchQuery(
            vector,
            config.unit_candidates,
            mine,
            with_payload=(UNIT_FIELD,),
            sparse=lexical.encode_query(words),
            sparse_limit=config.lexical_candidates,
        )
        return store.search_many(UNITS, [units_query])[0]

    units_hits = search_units(vector, query)
    units = [orjson.loads(h.payload[UNIT_FIELD]) for h in units_hits]
    words, scale = query, 1.0
    named = speakers.named_speakers(query, {s for u in units for s in u.get("speakers", ())})
    if named and config.speakerless_weight > 0:
        stripped = speakers.without_names(query, named)
        if lexical.tokenize(stripped):
            words = stripped
            vector, scale = speakers.mix(vector, embedder.embed([words])[0], config.speakerless_weight)
            units_hits = search_units(vector, words)
            units = [orjson.loads(h.payload[UNIT_FIELD]) for h in units_hits]
    limits = {kind: config.candidates for kind in LEAF_KINDS}
    if sessions:
        limits[MemoryKind.SESSION] = config.session_candidates
    memory_hits = store.search_many(
        MEMORIES,
        [
            SearchQuery(
                vector, limit, Filter(equals={USER_FIELD: user_key, KIND_FIELD: k.value}), (MEMORY_FIELD,)
            )
            for k, limit in limits.items()
        ],
    )
    cosines = _unit_cosines(store, vector, user_key, units_hits, config)
    leaves = [unit_record_item(u, scale * cosine) for u, cosine in zip(units, cosines, strict=True)]
    leaves += [
        memory_item(h.payload, scale * h.score) for hits in memory_hits[: len(LEAF_KINDS)] for h in hits
    ]
    nodes = [memory_item(h.payload, scale * h.score) for hits in memory_hits[len(LEAF_KINDS) :] for h in hits]
    return leaves, nodes, words, vector, named


def _ancestors(
    store: VectorStore,
    user_key: str,
    leaves: Collection[rank.Item],
    sessions: Sequence[rank.Item],
    max_session_lookups: int,
) -> tuple[dict[str, rank.Item], dict[str, str]]:
    """Every tree node above the leaves, by id, and each unit's session id: a unit's session is the node
    listing it among its ``children`` (from ``sessions``, else looked up for the first
    ``max_session_lookups`` such units), then up the ``parent_id`` chain; a fact's episode by its
    ``parent_id``."""
    by_id: dict[str, rank.Item] = {}
    session_of = {child: s.id for s in sessions for child in s.children}
    units = [leaf for leaf in leaves if leaf.kind == "unit"]
    for leaf in [u for u in units if u.id not in session_of][:max_session_lookups]:
        hits, _ = store.scroll(MEMORIES, Filter(equals={USER_FIELD: user_key, "children": leaf.id}), 4)
        for h in hits:
            node = memory_item(h.payload, 0.0)
            sessions = [*sessions, node]
            session_of.setdefault(leaf.id, node.id)
    fetched = {s.id: s for s in sessions}
    frontier: set[str] = set()
    for leaf in leaves:
        if leaf.kind == "unit" and leaf.id in session_of:
            session = fetched[session_of[leaf.id]]
            by_id[session.id] = session
            frontier.add(session.parent_id or "")
        elif leaf.parent_id:
            frontier.add(leaf.parent_id)
    frontier.discard("")
    frontier -= by_id.keys()
    while frontier:
        found = [memory_item(h.payload, 0.0) for h in store.retrieve(MEMORIES, sorted(frontier))]
        by_id.update((n.id, n) for n in found)
        frontier = {n.parent_id for n in found if n.parent_id and n.parent_id not in by_id}
    return by_id, session_of


def _with_parent(item: rank.Item, session_of: dict[str, str]) -> rank.Item:
    """A unit's parent is the session node that lists it (units carry no link themselves)."""
    if item.kind != "unit" or item.id not in session_of:
        return item
    return replace(item, parent_id=session_of[item.id])


# Recall reads a few fields of every candidate's stored record, and validating whole ``Unit`` and ``Memory``
# records (pydantic) was a sixth of its CPU: the records were validated when written (only the indexer and
# the ingest processor write them), so they are read here as plain JSON. The values are the same as the
# validated record's (strings as stored, datetimes from their ISO form; ``covers_turn_ids`` defaults to
# ``source_turn_ids`` as ``Memory`` does).


def unit_item(payload: dict[str, Any], score: float) -> rank.Item:
    """A stored unit (its payload's ``unit`` record) as a recall item."""
    return unit_record_item(orjson.loads(payload[UNIT_FIELD]), score)


def unit_record_item(unit: dict[str, Any], score: float) -> rank.Item:
    """A stored unit's record (``Unit`` as JSON, read) as a recall item."""
    ts = datetime.fromisoformat(unit["ts"])
    turn = (unit["turn_id"],)
    return rank.Item(
        id=unit["unit_id"],
        kind="unit",
        level=1,
        text=unit["text"],
        start=ts,
        end=None,
        recorded_at=ts,
        source_turn_ids=turn,
        covers_turn_ids=turn,
        dense=score,
        session_id=unit["session_id"],
        event_times=tuple(
            (datetime.fromisoformat(e["start"]), datetime.fromisoformat(e["end"]), e["granularity"])
            for e in unit.get("event_times", ())
        ),
    )


def _with_brief(item: rank.Item, slots: dict[str, int]) -> rank.Item:
    """A unit with its ``brief``: its sentence nearest the query (``_nearest_sentences``)."""
    slot = slots.get(item.id)
    return item if item.kind != "unit" or slot is None else replace(item, brief=brief(item.text, slot))


def brief(text: str, slot: int) -> str:
    """The sentence of a unit's ``text`` at sentence ``slot`` (``unit_views.sentence_texts``, from
    1), "Speaker: sentence"; "" when the unit is one sentence, the slot is not one of its sentences or
    the sentence is small talk (``sentences.is_small_talk``): a brief must say something."""
    said = sentence_texts(text)
    if len(said) < 2 or not 1 <= slot <= len(said):
        return ""
    sentence = said[slot - 1]
    return "" if is_small_talk(sentence.partition(": ")[2] or sentence) else sentence


def memory_item(payload: dict[str, Any], score: float) -> rank.Item:
    """A stored memory (its payload's ``memory`` record) as a recall item: ``item_of`` without validating
    the whole ``Memory``."""
    memory = orjson.loads(payload[MEMORY_FIELD])
    end = memory.get("end")
    source = memory.get("source_turn_ids", ())
    return rank.Item(
        id=memory["memory_id"],
        kind=memory["kind"],
        level=memory["level"],
        text=memory["text"],
        start=datetime.fromisoformat(memory["start"]),
        end=None if end is None else datetime.fromisoformat(end),
        recorded_at=datetime.fromisoformat(memory["recorded_at"]),
        source_turn_ids=tuple(source),
        covers_turn_ids=tuple(memory.get("covers_turn_ids", source)),
        parent_id=memory.get("parent_id"),
        children=tuple(memory.get("children", ())),
        current=memory.get("expired_at") is None,
        dense=score,
    )


def item_of(memory: Memory, score: float) -> rank.Item:
    return rank.Item(
        id=memory.memory_id,
        kind=memory.kind.value,
        level=memory.level,
        text=memory.text,
        start=memory.start,
        end=memory.end,
        recorded_at=memory.recorded_at,
        source_turn_ids=tuple(memory.source_turn_ids),
        covers_turn_ids=tuple(memory.covers_turn_ids),
        parent_id=memory.parent_id,
        children=tuple(memory.children),
        current=memory.current,
        dense=score,
    )

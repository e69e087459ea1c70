"""The ingest processor: one batch of turn records in, stored units and events out.

Per batch: validate -> semantic time -> embed (each unit and its sentences) -> recurrence check ->
upsert into ``unit_views`` (``memstream.core.unit_views``: one point a unit), then ``units`` -> window
tracking. Each unit is stored in its partition's store (``memstream.adapters.store.shards``).
It is independent of faust (the topology in ``memstream.streams.app`` feeds it), so tests and
benchmarks can drive it directly. At-least-once safe: unit ids are deterministic, a
redelivered turn is recognised by id and content hash, and a unit is written together with the
recurrence decision it took part in, so a redelivery can repeat that decision's effects.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, TypeVar

import orjson

from memstream.adapters import metrics
from memstream.adapters.settings import Settings
from memstream.adapters.store.shards import Shards
from memstream.core import lexical
from memstream.core.embedder import Embedder, Vectors
from memstream.core.recurrence import Neighbour, recurrence, top_k
from memstream.core.semantic_time import extract_event_times
from memstream.core.store import Filter, Point, Range, SearchQuery, VectorStore
from memstream.core.unit_views import UNIT_VIEWS, context_vector, view_point, with_sentences
from memstream.core.units import (
    UNIT_FIELD,
    UNITS,
    build_unit,
    consolidated_payload,
    fired_request,
    in_buffer,
    stored_payload,
    unit_from_payload,
)
from memstream.core.validation import Rejection, check_key, limits_from, validate, zone_of
from memstream.core.windows import UserWindows, advance
from memstream.schemas.events import (
    ConsolidationRequest,
    DeadLetter,
    DeadLetterStage,
    Unit,
    WindowClosed,
    partition_key,
)

T = TypeVar("T")
_NO_MARKS: frozenset[str] = frozenset()  # a user with no cluster in the batch yet
Located = tuple[int, T]  # (partition, value)


@dataclass(frozen=True)
class Incoming:
    """One record as read from a topic (:meth:`read`), or built by hand from a text key (tests,
    benchmarks, the in-process pipeline), whose partition, offset and time may be left out."""

    value: bytes | None
    key: str | None  # as text (undecodable bytes replaced): what validation and dead letters read
    topic: str
    partition: int | None = None
    offset: int | None = None
    # When the record's work was made (epoch seconds): its create time, or its MADE_AT header
    # (streams/decisions.py): re-queued work keeps its first record's, memory updates their work's start.
    timestamp: float | None = None
    raw_key: bytes | None = None  # the key's bytes as read, when read from a topic

    @classmethod
    def read(
        cls,
        key: bytes | None,
        value: bytes | None,
        topic: str,
        partition: int,
        offset: int,
        timestamp: float | None,
    ) -> Incoming:
        text = key.decode("utf-8", "replace") if key is not None else None
        return cls(value, text, topic, partition, offset, timestamp, key)

    @property
    def key_bytes(self) -> bytes | None:
        """The key as read: what the tables are keyed by (built by hand: the text key's UTF-8)."""
        if self.raw_key is not None or self.key is None:
            return self.raw_key
        return self.key.encode()

    @property
    def home(self) -> int:
        """The partition it was read from (built by hand: 0)."""
        return self.partition or 0


@dataclass(frozen=True)
class Embedded:
    """A chunk's vectors: each unit's whole-turn vector, and each unit's sentence vectors (rows in
    ``sentence_texts`` order; a unit of one sentence has its whole-turn vector)."""

    units: Vectors
    sentences: list[Vectors]


class Previous(NamedTuple):
    """A user's latest unit so far, whose vector the next unit of its session adds to its context vector."""

    session_id: str
    ts: datetime
    vector: Vectors


@dataclass
class BatchResult:
    """What a batch produced, for the caller to publish."""

    duplicates: int = 0
    consolidation: list[ConsolidationRequest] = field(default_factory=list)
    windows: list[WindowClosed] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    # Each user's window state after the batch (UserWindows JSON), to be saved once the windows
    # it closed are published: saved first, a crash in between would lose those closings for
    # good (a redelivered unit the state has seen is not tracked again).
    window_state: dict[bytes, dict[str, Any]] = field(default_factory=dict)


class IngestProcessor:
    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        shards: Shards,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.embedder = embedder
        self.shards = shards  # opened with units_spec(embedder.dim)
        self.clock = clock
        self.theta_sim = (
            settings.consolidation.theta_sim
            if settings.consolidation.theta_sim is not None
            else embedder.default_theta_sim
        )
        self.limits = limits_from(
            settings.limits.max_turn_bytes,
            settings.limits.min_ts,
            settings.limits.max_future_skew_s,
            settings.windows.zone,
        )
        self.session_gap = timedelta(seconds=settings.windows.session_gap_s)
        self.idle_close = timedelta(seconds=settings.windows.idle_close_s)
        self.late_tolerance = timedelta(seconds=settings.windows.late_event_tolerance_s)

    async def process(self, batch: Sequence[Incoming], window_state: Mapping[bytes, Any]) -> BatchResult:
        """Process one batch. ``window_state`` maps the ``tenant/user`` key bytes to the JSON of
        :class:`UserWindows` (a faust table in the app, a dict in tests); it is read, not written:
        the new states are in ``result.window_state``."""
        metrics.BATCH_SIZE.observe(len(batch))
        result = BatchResult()
        now = self.clock()
        fresh = self._validate(batch, now, result)
        new, replayed, known = self._split_known(fresh, result, now)
        windows = _read_windows([*(u for _, u in new), *known], window_state)
        # A stored unit the window tracker has not seen: an earlier attempt at this batch wrote it
        # and then failed (store outage, crash) before tracking. Tracked now, in arrival order.
        untracked = {u.unit_id for u in known if _after_windows(u, windows[u.key.encode()])}
        # The latest dialogue time each user already has in the store (the window tracker saw
        # every stored unit): a unit later than that needs no time bound on its neighbour query,
        # the costliest of its conditions. Users without state keep the bound.
        latest = {k.decode(): w.last_ts for k, w in windows.items() if w is not None}
        # Each user's latest unit, for the context vector of the next unit of its session: read from the
        # store (by the id the window state keeps) when a partition's share of the batch needs it.
        previous: dict[str, Previous | str] = {
            k.decode(): w.last_unit_id for k, w in windows.items() if w is not None and w.last_unit_id
        }
        # Pipelined in chunks: the embedder (onnxruntime or HTTP, both release the GIL) works on
        # chunk k+1 in a thread while chunk k is checked and stored here. Chunks are recorded in
        # order, so each one sees every earlier unit, as if units were handled one by one.
        size = self.settings.embedding.embed_batch_size
        chunks = [new[i : i + size] for i in range(0, len(new), size)] or [[]]
        pending = asyncio.ensure_future(asyncio.to_thread(self._embed, chunks[0]))
        for k, chunk in enumerate(chunks):
            vectors = await pending
            if k + 1 < len(chunks):
                pending = asyncio.ensure_future(asyncio.to_thread(self._embed, chunks[k + 1]))
            self._record(chunk, vectors, replayed if k == 0 else [], result, latest, previous)
        to_track = {u.unit_id for _, u in new} | untracked
        with metrics.STAGE_SECONDS.labels("windows").time():
            self._track_windows([u for _, u in fresh if u.unit_id in to_track], windows, now, result)
        return result

    # -- stages ------------------------------------------------------------------------

    def _validate(
        self, batch: Sequence[Incoming], now: float, result: BatchResult
    ) -> list[tuple[Incoming, Unit]]:
        """Valid turns as units (with semantic time), de-duplicated within the batch."""
        units: dict[str, tuple[Incoming, Unit]] = {}
        tenants: Counter[str] = Counter()
        with metrics.STAGE_SECONDS.labels("validate").time():
            wall = datetime.fromtimestamp(now, UTC)
            for rec in batch:
                turn = validate(rec.value, self.limits, wall)
                if not isinstance(turn, Rejection):
                    turn = check_key(rec.key, turn) or turn
                if isinstance(turn, Rejection):
                    result.dead_letters.append(dead_letter(rec, turn, now))
                    continue
                tenants[turn.tenant] += 1
                unit = build_unit(turn, zone_of(turn, self.settings.windows.zone), extract_event_times)
                seen = units.get(unit.unit_id)
                if seen is None:
                    units[unit.unit_id] = (rec, unit)
                elif seen[1].content_hash == unit.content_hash:
                    result.duplicates += 1
                else:
                    result.dead_letters.append(dead_letter(rec, _reused(unit), now))
        # Metrics per batch, not per turn: a labelled increment costs as much as a small stage.
        for tenant, n in tenants.items():
            metrics.TURNS_INGESTED.labels(tenant).inc(n)
        granularities = Counter(et.granularity.value for _, u in units.values() for et in u.event_times)
        for granularity, n in granularities.items():
            metrics.EVENT_TIMES.labels(granularity).inc(n)
        return list(units.values())

    def _split_known(
        self, fresh: list[tuple[Incoming, Unit]], result: BatchResult, now: float
    ) -> tuple[list[Located[Unit]], list[Located[ConsolidationRequest]], list[Unit]]:
        """New units, and the requests that redelivered units fired, with their partitions; and
        the redelivered units."""
        existing: dict[str, dict[str, Any]] = {}
        for p, ids in _group((rec.home, u.unit_id) for rec, u in fresh).items():
            existing.update((h.id, h.payload) for h in self.shards.get(p).retrieve(UNITS, ids))
        new: list[Located[Unit]] = []
        replayed: list[Located[ConsolidationRequest]] = []
        known: list[Unit] = []
        for rec, unit in fresh:
            prior = existing.get(unit.unit_id)
            if prior is None:
                new.append((rec.home, unit))
            elif unit_from_payload(prior).content_hash != unit.content_hash:
                result.dead_letters.append(dead_letter(rec, _reused(unit), now))
            else:
                result.duplicates += 1
                known.append(unit)
                if (request := fired_request(prior)) is not None:
                    replayed.append((rec.home, request))
        metrics.DUPLICATE_TURNS.inc(result.duplicates)
        # Arrival order, not dialogue-time order: one by one, a unit sees what arrived before it
        # (and is earlier in dialogue time), so that is what a batch must reproduce.
        return new, replayed, known

    def _embed(self, units: list[Located[Unit]]) -> Embedded:
        """The units' texts and the sentences of those with more than one, in one embedder call; without
        ``sentence_views`` a unit's one sentence vector is its whole-turn vector."""
        own = [u.text for _, u in units]
        texts, rows = (
            with_sentences(own)
            if self.settings.embedding.sentence_views
            else (own, [[i] for i in range(len(own))])
        )
        with (
            metrics.EMBED_SECONDS.labels(self.embedder.name).time(),
            metrics.STAGE_SECONDS.labels("embed").time(),
        ):
            vectors = self.embedder.embed(texts)
        return Embedded(vectors[: len(units)], [vectors[r] for r in rows])

    def _record(
        self,
        new: list[Located[Unit]],
        embedded: Embedded,
        replayed: list[Located[ConsolidationRequest]],
        result: BatchResult,
        latest: dict[str, datetime],
        previous: dict[str, Previous | str],
    ) -> None:
        """Record each partition's share in that partition's store (a user's units and requests
        all live on the user's partition)."""
        units = _group(((p, i) for i, (p, _) in enumerate(new)))
        requests = _group(replayed)
        for p in units.keys() | requests.keys():
            idx = units.get(p, [])
            store = self.shards.get(p)
            mine = [new[i][1] for i in idx]
            # Views first: a crash before the units are written leaves view points that a redelivery
            # writes again (same ids); the other way round, a stored unit would lack its views.
            sentences = [embedded.sentences[i] for i in idx]
            with metrics.STAGE_SECONDS.labels("upsert").time():
                views = self._views(store, mine, embedded.units[idx], sentences, previous)
                if views:
                    store.upsert(UNIT_VIEWS, views)
            self._record_in(store, mine, embedded.units[idx], requests.get(p, []), result, latest)

    def _record_in(
        self,
        store: VectorStore,
        new: list[Unit],
        vectors: Vectors,
        replayed: list[ConsolidationRequest],
        result: BatchResult,
        latest: dict[str, datetime],
    ) -> None:
        """Run the recurrence check on new units, then store them with its outcome.

        Order matters for crash safety: new units are written *with* their decisions (state, and
        the request a trigger fired), then older members are marked, then the caller publishes.
        A redelivered unit found in the store re-publishes its request and re-applies the marks
        (both idempotent), so a crash anywhere in between neither loses nor doubles a request.
        The marks are re-applied before the new units are checked, as they were made the first
        time: after a crash before the marking, the new units would find those members still
        buffered and take them into a second request.
        """
        if replayed:
            members = sorted({i for req in replayed for i in req.unit_ids})
            store.set_payload(UNITS, members, consolidated_payload())
        with metrics.STAGE_SECONDS.labels("recurrence").time():
            fired = self._recurrence(store, new, vectors, latest)
        marked = {i for req in fired.values() for i in req.unit_ids}

        with metrics.STAGE_SECONDS.labels("upsert").time():
            points = []
            for unit, vector in zip(new, vectors, strict=True):
                payload = stored_payload(unit, unit.unit_id in marked, fired.get(unit.unit_id))
                points.append(Point(unit.unit_id, vector, payload, lexical.encode_document(unit.text)))
            store.upsert(UNITS, points)
            for unit in new:
                if unit.key in latest:
                    latest[unit.key] = max(latest[unit.key], unit.ts)
            older = sorted(marked - {u.unit_id for u in new})
            if older:
                store.set_payload(UNITS, older, consolidated_payload())
        for tenant, n in Counter(u.tenant for u in new).items():
            metrics.UNITS_STORED.labels(tenant).inc(n)
        result.consolidation.extend([*replayed, *fired.values()])

    def _views(
        self,
        store: VectorStore,
        units: list[Unit],
        vectors: Vectors,
        sentences: list[Vectors],
        previous: dict[str, Previous | str],
    ) -> list[Point]:
        """The units' view points, in arrival order: each unit's context vector adds the latest earlier
        unit of its session (from this batch, or stored and named by the window state)."""
        stored = sorted({v for u in units if isinstance(v := previous.get(u.key), str)})
        for hit in store.retrieve(UNITS, stored, with_vectors=True) if stored else []:
            unit = orjson.loads(hit.payload[UNIT_FIELD])
            if hit.vector is not None:
                ts = datetime.fromisoformat(unit["ts"])
                key = partition_key(unit["tenant"], unit["user_id"])
                previous[key] = Previous(unit["session_id"], ts, hit.vector)
        points: list[Point] = []
        for unit, vector, mine in zip(units, vectors, sentences, strict=True):
            prior = previous.get(unit.key)
            if not isinstance(prior, Previous):
                prior = None
            before = (
                prior.vector
                if prior is not None and prior.session_id == unit.session_id and prior.ts <= unit.ts
                else None
            )
            points.append(view_point(unit, mine, context_vector(vector, before)))
            if prior is None or unit.ts >= prior.ts:  # a late unit is nobody's predecessor
                previous[unit.key] = Previous(unit.session_id, unit.ts, vector)
        return points

    def _recurrence(
        self, store: VectorStore, units: list[Unit], vectors: Vectors, latest: dict[str, datetime]
    ) -> dict[str, ConsolidationRequest]:
        """Recurrence for units in arrival order, exactly as if checked one by one: each
        sees the top-k buffered earlier units, from the store and from this batch. Marks made
        earlier in the batch are not in the store yet (they are written with the units), so they
        are excluded here, and a store result that held a now-marked unit is asked again."""
        from_store = store.search_ids(
            UNITS,
            [
                self._neighbour_query(u, v, (), bounded=u.key not in latest or u.ts <= latest[u.key])
                for u, v in zip(units, vectors, strict=True)
            ],
        )
        peers = _batch_peers(units, vectors)
        metrics.RECURRENCE_CHECKS.inc(len(units))
        # Marks by user: a unit's store hits and batch peers are all of its user (the neighbour query's
        # buffer condition), so its own user's marks are all it needs to exclude (each id excluded from
        # a query costs Edge a UUID parse).
        marked: dict[str, set[str]] = {}
        fired: dict[str, ConsolidationRequest] = {}
        for i, unit in enumerate(units):
            mine = marked.get(unit.key, _NO_MARKS)
            hits = from_store[i]
            if any(h in mine for h, _ in hits):
                hits = store.search_ids(UNITS, [self._neighbour_query(unit, vectors[i], mine)])[0]
            candidates = [Neighbour(h, s, False) for h, s in hits]
            candidates += [
                Neighbour(units[j].unit_id, s, False) for j, s in peers[i] if units[j].unit_id not in mine
            ]
            cluster = recurrence(
                unit.unit_id,
                top_k(candidates, self.settings.consolidation.recurrence_top_k),
                self.theta_sim,
                self.settings.consolidation.theta_count,
            )
            if cluster is None:
                continue
            marked.setdefault(unit.key, set()).update(cluster.unit_ids)
            fired[unit.unit_id] = ConsolidationRequest(
                request_id=cluster.request_id,
                tenant=unit.tenant,
                user_id=unit.user_id,
                trigger_unit_id=unit.unit_id,
                unit_ids=cluster.unit_ids,
                similarities=[round(s, 4) for s in cluster.similarities],
                theta_sim=self.theta_sim,
                theta_count=self.settings.consolidation.theta_count,
                fired_at=unit.ts,
            )
            metrics.CONSOLIDATION_REQUESTS.labels("recurrence").inc()
        return fired

    def _neighbour_query(
        self, unit: Unit, vector: Any, marked: Iterable[str], *, bounded: bool = True
    ) -> SearchQuery:
        """RecMem's subconscious neighbourhood: the top-k *buffered* (not yet consolidated) units
        of the same user that came earlier in dialogue time, so batching cannot change the result.
        ``bounded=False`` leaves out the time bound when no stored unit can be that late."""
        return SearchQuery(
            vector,
            self.settings.consolidation.recurrence_top_k,
            Filter(
                equals=in_buffer(unit.key),
                ranges={"ts_epoch": Range(lt=unit.ts.timestamp())} if bounded else {},
                # The unit itself is not stored yet (it is written with its decision), so only
                # units marked earlier in this batch need excluding; an empty list costs nothing.
                exclude_ids=tuple(marked),
            ),
            with_payload=False,
        )

    def _track_windows(
        self,
        units: list[Unit],
        by_user: dict[bytes, UserWindows | None],
        now: float,
        result: BatchResult,
    ) -> None:
        for unit in units:  # arrival order: a turn older than what came before is a late event
            key = unit.key.encode()
            before = by_user[key]
            after, closed = advance(
                before,
                tenant=unit.tenant,
                user_id=unit.user_id,
                session_id=unit.session_id,
                ts=unit.ts,
                zone=unit.ts.tzinfo,  # type: ignore[arg-type]  # build_unit attaches a ZoneInfo
                now=now,
                session_gap=self.session_gap,
                late_tolerance=self.late_tolerance,
            )
            if before is not None and after.late_events > before.late_events:
                metrics.LATE_EVENTS.inc()
            elif after.last_ts == unit.ts:  # the user's latest unit: the next one's predecessor
                after = after.with_last_unit(unit.unit_id)
            by_user[key] = after
            result.windows.extend(closed)
        # One state write per user per batch: each write is a changelog record.
        result.window_state = {key: value.to_json() for key, value in by_user.items() if value is not None}


def dead_letter(rec: Incoming, why: Rejection, now: float) -> DeadLetter:
    """The dead letter of a record that failed, counted by stage and reason."""
    metrics.DEAD_LETTERS.labels(why.stage.value, why.reason).inc()
    return DeadLetter(
        original=rec.value or b"",
        key=rec.key,
        source_topic=rec.topic,
        partition=rec.partition,
        offset=rec.offset,
        stage=why.stage,
        reason=why.reason,
        detail=why.detail,
        at=datetime.fromtimestamp(now, UTC),
    )


def _read_windows(units: Iterable[Unit], state: Mapping[bytes, Any]) -> dict[bytes, UserWindows | None]:
    """Each user's window state, read once per batch."""
    out: dict[bytes, UserWindows | None] = {}
    for unit in units:
        key = unit.key.encode()
        if key not in out:
            raw = state.get(key)
            out[key] = UserWindows.from_json(raw) if raw else None
    return out


def _after_windows(unit: Unit, windows: UserWindows | None) -> bool:
    """Whether ``unit`` is later than everything the user's window state has seen."""
    return windows is None or unit.ts > windows.last_ts


def _group(pairs: Iterable[tuple[int, T]]) -> dict[int, list[T]]:
    """Values by partition, each list in arrival order."""
    out: dict[int, list[T]] = {}
    for p, value in pairs:
        out.setdefault(p, []).append(value)
    return out


def _batch_peers(units: list[Unit], vectors: Vectors) -> list[list[tuple[int, float]]]:
    """For each unit, the (index, cosine) of the same user's units that arrived before it in the
    batch and are earlier in dialogue time (the store query's `ts_epoch < ts` for this batch)."""
    peers: list[list[tuple[int, float]]] = [[] for _ in units]
    by_user: dict[str, list[int]] = {}
    for i, u in enumerate(units):
        by_user.setdefault(u.key, []).append(i)
    for idx in by_user.values():
        if len(idx) < 2:
            continue
        sims = vectors[idx] @ vectors[idx].T
        for a, i in enumerate(idx):
            peers[i] = [(j, float(sims[a, b])) for b, j in enumerate(idx[:a]) if units[j].ts < units[i].ts]
    return peers


def _reused(unit: Unit) -> Rejection:
    return Rejection(
        DeadLetterStage.IDEMPOTENCY,
        "turn_id_reused",
        f"turn_id {unit.turn_id!r} was already stored with different content "
        "(a turn_id is an idempotency key)",
    )

"""What each agent of the topology (streams/app.py) does with its records, as plain objects with
explicit dependencies and no faust types: records in as ``Incoming``, decisions out
(streams/decisions.py), which the topology publishes. Tests call these, not copies of them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Protocol, TypeVar

from memstream.adapters.llm import BudgetExhausted, InvalidOutput, LLMUnavailable
from memstream.adapters.pause import until_available
from memstream.core.due import DueTimes
from memstream.core.forgetting import Forgotten, erase_user, made_before, sent_before
from memstream.core.store import VectorStore
from memstream.core.tree import TreeState, in_closing_order
from memstream.core.validation import Rejection
from memstream.core.windows import UserWindows, close_idle, idle_due
from memstream.schemas.events import (
    ConsolidationRequest,
    DeadLetter,
    DeadLetterStage,
    Deferred,
    Record,
    Tombstone,
    WindowClosed,
    WindowLevel,
)
from memstream.schemas.memory import MemoryUpdate
from memstream.schemas.topics import CONSOLIDATION, DEAD_LETTER, DEFERRED, WINDOWS
from memstream.streams.decisions import DeadLettered, Decision, Deferral, Done, Dropped, Send, sends
from memstream.streams.ingest import BatchResult, Incoming, dead_letter
from memstream.streams.read_your_writes import Interrupted, ReadYourWrites

R = TypeVar("R", bound=Record)
T = TypeVar("T")

DURATIVE = "durative"  # deferred work that is not a topic's record: a month's durative memory
DEFER_HOLD_S = 5.0  # deferred work due within this is waited for in place, later work re-queued
RECURRENCE = "recurrence"  # the trigger of a consolidation request
# Users whose idle windows one call closes: the timer publishes them holding the lock ingest waits
# for, so a burst of users going idle at once (100,000 after a replay: 2 minutes) goes in slices.
IDLE_USERS_PER_CLOSE = 1000
# A user whose partition still holds turns not yet ingested is looked at again this much later.
BEHIND_RECHECK_S = 1.0

Clock = Callable[[], float]  # epoch seconds
Sleep = Callable[[float], Awaitable[None]]
StoreOf = Callable[[int], VectorStore]  # a partition's store
Gone = Callable[[bytes | None], Forgotten | None]  # a user's deletion, by key


class Publish(Protocol):
    """Makes decisions take effect (streams/publish.py, the topology's one place)."""

    async def __call__(self, *decisions: Decision) -> None: ...


def rejected(
    r: Incoming, stage: DeadLetterStage, reason: str, exc: Exception, now: float, value: bytes | None = None
) -> DeadLetter:
    """The dead letter of a record that failed; ``value``: the record inside a deferred one."""
    return dead_letter(
        r if value is None else replace(r, value=value), Rejection(stage, reason, str(exc)[:2000]), now
    )


def read(r: Incoming, model: type[R], now: float) -> R | DeadLettered:
    """The record, or its dead letter when it is unreadable."""
    try:
        return model.from_bytes(r.value or b"")
    except ValueError as exc:
        return DeadLettered([rejected(r, DeadLetterStage.VALIDATE, "invalid_record", exc, now)])


def deferral(job: Job, exc: Exception, retry_s: float, trigger: str) -> Deferral:
    now = job.now
    if isinstance(exc, BudgetExhausted):
        reason, not_before = "token_budget", exc.resets_at
    elif isinstance(exc, Interrupted):  # handed on to whoever holds the partition next, at once
        reason, not_before = "rebalance", datetime.fromtimestamp(now, UTC)
    else:
        reason, not_before = "llm_unavailable", datetime.fromtimestamp(now, UTC) + timedelta(seconds=retry_s)
    work = Deferred(
        source_topic=job.source,
        key=job.key.decode("utf-8", "replace"),
        value=job.value,
        reason=reason,
        not_before=not_before,
    )
    return Deferral(work, trigger, job.received.timestamp)


@dataclass(frozen=True)
class Job:
    """One piece of consolidation work: ``value`` (the record's, or one carried by deferred work
    or parked in the tree state), counted and deferred as ``source``, begun at ``now``."""

    received: Incoming
    source: str
    value: bytes
    now: float

    @property
    def key(self) -> bytes:
        return self.received.key_bytes or b""


class Consolidating:
    """The steps every piece of consolidation work takes, and their failure paths: a deleted
    user's work -> dropped; an unreadable record, or output still invalid after the writer's
    repair attempt -> dead-lettered; LLM budget spent, LLM down, or the worker stopping or
    rebalancing -> deferred (tried again later, never dropped)."""

    def __init__(
        self,
        store_of: StoreOf,
        barrier: ReadYourWrites,
        gone: Gone,
        interrupted: Callable[[], bool],
        clock: Clock,
        defer_retry_s: float,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.store_of = store_of
        self.barrier = barrier
        self.gone = gone
        self.interrupted = interrupted
        self.clock = clock
        self.defer_retry_s = defer_retry_s
        self.sleep = sleep

    def job(self, r: Incoming, source: str, value: bytes | None = None) -> Job:
        return Job(r, source, r.value or b"" if value is None else value, self.clock())

    def decode(self, job: Job, model: type[R]) -> R | Dropped | DeadLettered:
        if made_before(self.gone(job.key), job.received.timestamp):
            return Dropped(job.source)  # made from a deleted user's data
        try:
            return model.from_bytes(job.value)
        except ValueError as exc:
            dead = rejected(job.received, DeadLetterStage.VALIDATE, "invalid_record", exc, job.now)
            return DeadLettered([dead], trigger=job.source)

    async def attempt(
        self, job: Job, trigger: str, work: Callable[[VectorStore], Awaitable[T]]
    ) -> T | Deferral | DeadLettered:
        """``work`` on the partition's store, once what is already published is indexed:
        decisions must not depend on the indexer's pace (streams/read_your_writes.py)."""
        partition = job.received.home
        try:
            store = self.store_of(partition)

            async def step() -> T:
                await self.barrier.wait(
                    store, partition, job.key.decode("utf-8", "replace"), self.interrupted
                )
                return await work(store)

            return await until_available(step, "consolidate", self.sleep)
        except (BudgetExhausted, LLMUnavailable, Interrupted) as exc:
            return deferral(job, exc, self.defer_retry_s, trigger)
        except InvalidOutput as exc:
            dead = rejected(job.received, DeadLetterStage.CONSOLIDATE, exc.reason, exc, job.now, job.value)
            return DeadLettered([dead], trigger=trigger)

    def finished(self, job: Job, updates: Sequence[MemoryUpdate], trigger: str) -> Done | Dropped:
        if made_before(self.gone(job.key), job.now):
            return Dropped(job.source)  # the user was deleted while this ran
        # The user may still be deleted before the updates are sent: they carry when this began.
        return Done(updates=updates, trigger=trigger, made_at=job.now)


class Requests:
    """[consolidation] -> episodes and facts (consumers/recurrence.py)."""

    def __init__(
        self,
        step: Consolidating,
        consolidate: Callable[[VectorStore, ConsolidationRequest], Awaitable[list[MemoryUpdate]]],
    ) -> None:
        self.step = step
        self.consolidate = consolidate

    async def request(self, r: Incoming) -> Decision:
        job = self.step.job(r, CONSOLIDATION.name)
        request = self.step.decode(job, ConsolidationRequest)
        if isinstance(request, Dropped | DeadLettered):
            return request
        updates = await self.step.attempt(job, RECURRENCE, lambda store: self.consolidate(store, request))
        if isinstance(updates, Deferral | DeadLettered):
            return updates
        return self.step.finished(job, updates, RECURRENCE)


Summarize = Callable[[VectorStore, TreeState, WindowClosed], Awaitable[tuple[TreeState, list[MemoryUpdate]]]]


class Summaries:
    """[windows] -> Temporal Memory Tree nodes (consumers/tree.py), in the order the windows
    closed (memstream/core/tree.py parks a user's later windows behind a deferred one); a closed month
    also schedules its durative memory on [deferred]. The user's tree state moves on only once
    the nodes are delivered: a crash in between replays the window against the old state, which
    rebuilds the same node (same id, same children)."""

    def __init__(
        self,
        step: Consolidating,
        summarize: Summarize,
        states: MutableMapping[bytes, Any],
        publish: Publish,
        durative_delay_s: float,
    ) -> None:
        self.step = step
        self.summarize = summarize
        self.states = states  # TreeState JSON per user key
        self.publish = publish  # each window's nodes are delivered before the next is summarised
        self.durative_delay_s = durative_delay_s

    async def window(self, r: Incoming) -> None:
        window = read(r, WindowClosed, self.step.clock())
        if isinstance(window, DeadLettered):
            await self.publish(window)
            return
        key, started = r.key_bytes or b"", self.step.clock()
        raw = self.states.get(key)

        async def attempt(state: TreeState, w: WindowClosed) -> tuple[bool, TreeState]:
            # A parked window is not the record's: its own bytes are summarised.
            return await self.summarise(r, w, state, None if w is window else w.to_bytes())

        state = await in_closing_order(TreeState.from_json(raw) if raw else TreeState(), window, attempt)
        if not made_before(self.step.gone(key), started):
            self.states[key] = state.to_json()

    async def summarise(
        self, r: Incoming, window: WindowClosed, state: TreeState, parked: bytes | None
    ) -> tuple[bool, TreeState]:
        """Whether the window is done with (summarised, or dropped: not deferred), and the state
        after it."""
        job = self.step.job(r, WINDOWS.name, parked)
        record = self.step.decode(job, WindowClosed)
        if isinstance(record, Dropped | DeadLettered):
            await self.publish(record)
            return True, state
        trigger = record.level.value
        built = await self.step.attempt(job, trigger, lambda store: self.summarize(store, state, record))
        if isinstance(built, Deferral | DeadLettered):
            await self.publish(built)
            return isinstance(built, DeadLettered), state
        after, updates = built
        decision = self.step.finished(job, updates, trigger)
        if isinstance(decision, Dropped):
            await self.publish(decision)
            return True, state
        if window.level == WindowLevel.MONTH:
            decision = replace(decision, sends=sends(DEFERRED, [self.durative_job(window)], job.now))
        await self.publish(decision)
        return True, after

    def durative_job(self, month: WindowClosed) -> Deferred:
        """Durative memory clusters the month's facts, some of which may still be on their way
        from recurrence consolidation: it runs once they have surely landed."""
        due = datetime.fromtimestamp(self.step.clock(), UTC) + timedelta(seconds=self.durative_delay_s)
        return Deferred(
            source_topic=DURATIVE,
            key=month.key,
            value=month.to_bytes(),
            reason="durative_due",
            not_before=due,
        )


class Retries:
    """[deferred], in order per user. A record due soon is waited for in place; one due later (a
    spent budget waits for UTC midnight) goes back to the end of its partition, so that it holds up
    neither its stage's room (streams/key_ordered.py) nor a stop. Due work goes back
    to its topic, or, a month's durative memory, runs here."""

    def __init__(
        self,
        step: Consolidating,
        durative: Callable[[VectorStore, WindowClosed], Awaitable[list[MemoryUpdate]]],
        hold_s: float = DEFER_HOLD_S,
    ) -> None:
        self.step = step
        self.durative = durative
        self.hold_s = hold_s

    async def deferred(self, r: Incoming) -> Decision:
        if made_before(self.step.gone(r.key_bytes), r.timestamp):
            return Dropped(DEFERRED.name)  # made from a deleted user's data
        deferred = read(r, Deferred, self.step.clock())
        if isinstance(deferred, DeadLettered):
            return deferred
        wait = deferred.not_before.timestamp() - self.step.clock()
        if wait > self.hold_s:
            await self.step.sleep(1.0)  # paced: a waiting record goes round at most once a second
            return Done(sends=sends(DEFERRED, [deferred], r.timestamp))
        await self.step.sleep(max(0.0, wait))
        if deferred.source_topic == DURATIVE:
            return await self.durative_memory(r, deferred.value)
        return Done(sends=[Send(deferred.source_topic, deferred.key.encode(), deferred.value, r.timestamp)])

    async def durative_memory(self, r: Incoming, value: bytes) -> Decision:
        job = self.step.job(r, DURATIVE, value)
        month = self.step.decode(job, WindowClosed)
        if isinstance(month, Dropped | DeadLettered):
            return month
        updates = await self.step.attempt(job, DURATIVE, lambda store: self.durative(store, month))
        if isinstance(updates, Deferral | DeadLettered):
            return updates
        return self.step.finished(job, updates, DURATIVE)


class Ingesting:
    """[turns], a batch at a time (streams/ingest.py), with the turns of deleted users dropped."""

    def __init__(
        self,
        process: Callable[[Sequence[Incoming], MutableMapping[bytes, Any]], Awaitable[BatchResult]],
        states: MutableMapping[bytes, Any],
        gone: Gone,
        saved: Callable[[Mapping[bytes, Any]], None] = lambda _: None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.process = process
        self.states = states  # UserWindows JSON per user key
        self.gone = gone
        self.saved = saved  # told of each state written (the idle timer's due times)
        self.sleep = sleep

    def save(self, states: Mapping[bytes, Any]) -> None:
        self.states.update(states)
        self.saved(states)

    async def batch(self, records: Sequence[Incoming]) -> list[Decision]:
        kept = [r for r in records if not sent_before(self.gone(r.key_bytes), r.timestamp)]
        batch = kept
        result = await until_available(partial(self.process, batch, self.states), "ingest", self.sleep)
        done = Done(
            sends=[*sends(CONSOLIDATION, result.consolidation), *sends(DEAD_LETTER, result.dead_letters)],
            windows=result.windows,
            after=partial(self.save, result.window_state),  # after: see BatchResult
        )
        return [Dropped("ingest", len(records) - len(kept)), done]


class IdleWindows:
    """The timer that closes the windows of users gone quiet. A tick reads only the users due
    (memstream/core/due.py, kept with every window state written); the index is built from the
    table once per assignment of partitions, the one scan of the users."""

    def __init__(
        self,
        states: MutableMapping[bytes, Any],
        partition_of: Callable[[bytes], int],
        idle_close: timedelta,
        clock: Clock,
    ) -> None:
        self.states = states
        self.partition_of = partition_of
        self.idle_close = idle_close
        self.clock = clock
        self.due = DueTimes()
        self.built_for: int | None = None  # the assignment the index was built for

    def saved(self, states: Mapping[bytes, Any]) -> None:
        """``states`` were written to the table (None: deleted): their users' next due times."""
        for key, raw in states.items():
            self.due.set(key, idle_due(UserWindows.from_json(raw), self.idle_close) if raw else None)

    def close(
        self,
        owned: set[int],
        assignment: int,
        limit: int = IDLE_USERS_PER_CLOSE,
        behind: Collection[int] = (),
    ) -> Done:
        """Close what is due among at most ``limit`` users of ``owned`` partitions (the caller asks
        again while that many were due); ``assignment`` counts the assignments so far: the table
        holds other users after each one. Idleness is wall-clock time without events, so a user of a
        partition ``behind`` (turns in its log not ingested yet) is not idle but waiting: their next
        turn may be among them, and closing now would split one session in two (issue 27: a replay on
        a loaded machine, one ingest batch slower than the idle close). They are looked at again
        BEHIND_RECHECK_S later."""
        if self.built_for != assignment:
            self.due.clear()
            # The in-memory table also holds standby copies of other workers' users: not indexed.
            self.saved({k: raw for k, raw in self.states.items() if raw and self.partition_of(k) in owned})
            self.built_for = assignment
        closed: list[WindowClosed] = []
        after: dict[bytes, Any] = {}
        now = self.clock()
        for key in self.due.pop_due(now, limit):
            raw = self.states.get(key)
            if not raw or self.partition_of(key) not in owned:
                continue
            if self.partition_of(key) in behind:
                self.due.set(key, now + BEHIND_RECHECK_S)
                continue
            state, done = close_idle(UserWindows.from_json(raw), now=now, idle_close=self.idle_close)
            if done:
                after[key] = state.to_json()
                closed.extend(done)
                self.due.set(key, now)  # still due until the closed windows are out (``after``)
            else:
                self.due.set(key, idle_due(state, self.idle_close))

        def save() -> None:
            self.states.update(after)
            self.saved(after)

        # Published first: a crash in between closes the windows again (same ids), where
        # saved first it would lose them.
        return Done(windows=closed, after=save)


class Indexing:
    """[memory.updates] -> the ``memories`` collection (consumers/indexer.py), per partition."""

    def __init__(
        self,
        apply: Callable[
            [VectorStore, Sequence[MemoryUpdate], Callable[[MemoryUpdate], bool]], Awaitable[None]
        ],
        store_of: StoreOf,
        gone: Gone,
        clock: Clock,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.apply = apply
        self.store_of = store_of
        self.gone = gone
        self.clock = clock
        self.sleep = sleep

    async def batch(self, records: Sequence[Incoming]) -> list[Decision]:
        by_partition: dict[int, list[MemoryUpdate]] = {}
        made: dict[int, Incoming] = {}  # by id() of the update: the record it came in
        dead: list[DeadLetter] = []
        dropped = 0
        for r in records:
            if made_before(self.gone(r.key_bytes), r.timestamp):
                dropped += 1  # made from a deleted user's data
                continue
            update = read(r, MemoryUpdate, self.clock())
            if isinstance(update, DeadLettered):
                dead.extend(update.letters)
            else:
                by_partition.setdefault(r.home, []).append(update)
                made[id(update)] = r

        def keep(update: MemoryUpdate) -> bool:
            # Asked again at each write: the user may have been erased while the batch embedded.
            r = made[id(update)]
            return not made_before(self.gone(r.key_bytes), r.timestamp)

        for partition, updates in by_partition.items():
            write = partial(self.apply, self.store_of(partition), updates, keep)
            await until_available(write, "index", self.sleep)
        return [Dropped("index", dropped), DeadLettered(dead)]


class Forgetting:
    """[tombstones]: a user deleted through the gateway. Remember when (so that their records
    still on the way are dropped where they arrive: memstream/core/forgetting.py), drop their per-user
    state (open windows, memory tree, pending own writes), and delete their points again
    (whatever landed after the gateway's delete)."""

    def __init__(
        self,
        forgotten: MutableMapping[bytes, Any],
        user_tables: Sequence[MutableMapping[bytes, Any]],
        barrier: ReadYourWrites,
        store_of: StoreOf,
        collections: Sequence[str],
        clock: Clock,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.forgotten = forgotten
        self.user_tables = user_tables
        self.barrier = barrier
        self.store_of = store_of
        self.collections = collections  # those this worker's roles write
        self.clock = clock
        self.sleep = sleep

    async def tombstone(self, r: Incoming) -> Decision:
        stone = read(r, Tombstone, self.clock())
        if isinstance(stone, DeadLettered):
            return stone
        key = stone.key.encode()
        self.forgotten[key] = Forgotten(stone.deleted_at.timestamp(), self.clock()).to_json()
        self.barrier.own.forget(stone.key)
        for table in self.user_tables:
            if key in table:
                del table[key]
        erase = partial(self.erase, self.store_of(r.home), stone.key)
        await until_available(erase, "forget", self.sleep)
        return Done()

    async def erase(self, store: VectorStore, user_key: str) -> None:
        erase_user(store, user_key, self.collections)

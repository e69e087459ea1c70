"""The Temporal Memory Tree state machine and durative clustering, as pure functions.

Windows come from the real window tracker (memstream.core.windows) fed with generated sessions, so
the property covers sessions past midnight, weeks straddling months and idle closing."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from memstream.adapters.llm import LLMUnavailable
from memstream.adapters.settings import Settings
from memstream.adapters.store.shards import EdgeShards
from memstream.core.durative import cluster
from memstream.core.memories import upsert
from memstream.core.store import VectorStore
from memstream.core.tree import (
    KIND,
    TreeState,
    apply,
    covers,
    defer,
    hull,
    park,
    plan,
    unpark,
    waits,
)
from memstream.core.unit_views import views_spec
from memstream.core.units import units_spec
from memstream.core.windows import advance, close_idle
from memstream.schemas.events import Deferred, WindowClosed
from memstream.schemas.memory import LEVEL, Memory, MemoryKind, MemoryOp, MemoryUpdate
from memstream.schemas.topics import DEFERRED, MEMORY_UPDATES, WINDOWS, TopicSpec
from memstream.streams.decisions import Decision, Deferral, Done
from memstream.streams.handlers import DURATIVE, Consolidating, Retries, Summaries
from memstream.streams.ingest import Incoming
from memstream.streams.read_your_writes import OwnWrites, ReadYourWrites, Takeover

ZONE = ZoneInfo("Europe/Lisbon")
T0 = datetime(2024, 1, 29, 9, 0, tzinfo=UTC)


def windows_for(sessions: list[tuple[int, int, int]]) -> list[WindowClosed]:
    """Closed windows of one user for sessions given as (gap in hours, turns, minutes apart)."""
    state = None
    out: list[WindowClosed] = []
    ts = T0
    for n, (gap_h, turns, step_min) in enumerate(sessions):
        ts += timedelta(hours=gap_h)
        for _ in range(turns):
            state, closed = advance(
                state,
                tenant="t",
                user_id="u",
                session_id=f"s{n}",
                ts=ts,
                zone=ZONE,
                now=0.0,
                session_gap=timedelta(hours=1),
            )
            out.extend(closed)
            ts += timedelta(minutes=step_min)
    assert state is not None
    state, closed = close_idle(state, now=4e9, idle_close=timedelta(hours=1))
    return out + closed


def build(state: TreeState, window: WindowClosed) -> tuple[TreeState, Memory | None, list[Memory]]:
    """What the summarizer does, with a stand-in text; no node when the window was built already."""
    p = plan(state, window)
    if p is None:
        return state, None, []
    start, end = hull(window.start, window.end, [(c.start, c.end) for c in p.children])
    node = Memory(
        memory_id=p.node_id,
        tenant="t",
        user_id="u",
        kind=p.kind,
        level=LEVEL[p.kind],
        text=f"{p.kind.value} node",
        start=start,
        end=end,
        recorded_at=window.last_ts,
        children=[c.memory_id for c in p.children],
        window_id=window.window_id,
        extractive=True,
        writer="test",
    )
    state, linked = apply(state, window, node, p.children)
    return state, node, linked


sessions = st.lists(
    st.tuples(st.integers(2, 24 * 12), st.integers(1, 8), st.integers(1, 50)), min_size=1, max_size=40
)


@settings(max_examples=60, deadline=None)
@given(sessions)
def test_every_parent_covers_its_children_and_takes_each_once(spec: list[tuple[int, int, int]]) -> None:
    state = TreeState()
    nodes: dict[str, Memory] = {}
    parent_of: dict[str, str] = {}
    for window in windows_for(spec):
        state, node, linked = build(state, window)
        assert node is not None
        nodes[node.memory_id] = node
        for child in linked:
            assert child.memory_id not in parent_of, "a node has one parent"
            parent_of[child.memory_id] = node.memory_id
            assert child.parent_id == node.memory_id
            assert covers(node, child), (node, child)
            assert LEVEL[node.kind] == LEVEL[child.kind] + 1
    assert {n.kind for n in nodes.values()} >= {MemoryKind.SESSION, MemoryKind.DAY, MemoryKind.WEEK}
    # Every session is summarised into a day once its day has closed (idle closing closes all).
    sessions_ = [n for n in nodes.values() if n.kind == MemoryKind.SESSION]
    assert all(s.memory_id in parent_of for s in sessions_)


def test_month_builds_a_profile_that_refines_the_previous_one() -> None:
    spec = [(24 * 5, 3, 10)] * 14  # a session every five days for ten weeks
    state = TreeState()
    profiles = []
    for window in windows_for(spec):
        p = plan(state, window)
        if p.kind == MemoryKind.PROFILE:
            assert p.previous == (profiles[-1] if profiles else None)
        state, node, _ = build(state, window)
        if node is not None and node.kind == MemoryKind.PROFILE:
            profiles.append(node)
    assert len(profiles) >= 2
    assert all(p.children for p in profiles)
    assert MemoryKind.PROFILE not in state.pending


def test_history_keeps_the_three_latest_of_a_level_and_the_state_round_trips() -> None:
    state = TreeState()
    for window in windows_for([(30, 2, 5)] * 6):
        state, _node, _ = build(state, window)
    assert [n.kind for n in state.history[MemoryKind.SESSION]] == [MemoryKind.SESSION] * 3
    assert TreeState.from_json(state.to_json()) == state


def test_nodes_stored_before_covers_existed_read_with_covers_equal_to_source() -> None:
    state = TreeState()
    for window in windows_for([(30, 2, 5)] * 3):
        state, _node, _ = build(state, window)
    old = state.to_json()
    for nodes in (*old["pending"].values(), *old["history"].values()):
        for n in nodes:
            n["source_turn_ids"] = ["t1", "t2"]
            del n["covers_turn_ids"], n["sentence_turn_ids"]
    back = TreeState.from_json(old)
    assert {tuple(n.covers_turn_ids) for v in back.history.values() for n in v} == {("t1", "t2")}
    node = back.history[MemoryKind.SESSION][0]
    stored = MemoryUpdate(op=MemoryOp.UPSERT, memory_id=node.memory_id, tenant="t", user_id="u", memory=node)
    payload = orjson.loads(stored.to_bytes())
    del payload["memory"][
        "covers_turn_ids"
    ]  # what the memory.updates topic holds from before: reindex reads it
    assert MemoryUpdate.from_bytes(orjson.dumps(payload)).memory == node
    with pytest.raises(ValidationError, match="covers_turn_ids includes every source turn"):
        Memory.model_validate({**node.model_dump(), "covers_turn_ids": ["t1"]})


def test_replaying_a_window_changes_nothing() -> None:
    windows = windows_for([(30, 2, 5)] * 4)
    state = TreeState()
    for window in windows:
        state, _, _ = build(state, window)
    again, node, _ = build(state, windows[-1])
    assert node is None and again == state
    assert KIND[windows[-1].level] in again.history


def tree(windows: list[WindowClosed], state: TreeState | None = None) -> tuple[TreeState, dict[str, Memory]]:
    nodes: dict[str, Memory] = {}
    state = state or TreeState()
    for window in windows:
        state, node, linked = build(state, window)
        nodes.update({n.memory_id: n for n in (node, *linked) if n is not None})
    return state, nodes


@settings(max_examples=60, deadline=None)
@given(sessions, st.data())
def test_windows_redelivered_after_the_state_moved_on_give_the_same_tree(
    spec: list[tuple[int, int, int]], data: st.DataObject
) -> None:
    """A crash or a rebalance after the tree state (changelogged) was saved for windows ``i..j``
    but before their offsets were committed: they come again, on the state after ``j``. Without
    ``TreeState.built`` a session taken by its day became pending again and a later day took it a
    second time."""
    windows = windows_for(spec)
    whole, expected = tree(windows)
    j = data.draw(st.integers(0, len(windows)))
    i = data.draw(st.integers(0, j))
    state, nodes = tree(windows[:j])
    state, again = tree(windows[i:], state)
    assert state == whole
    assert {**nodes, **again} == expected


def test_durative_clusters_separate_topics_and_are_deterministic() -> None:
    rng = np.random.default_rng(0)
    groups = [rng.normal(0, 0.05, (n, 64)) + np.eye(64)[i] for i, n in enumerate((8, 10, 7))]
    vectors = np.vstack(groups).astype(np.float32)
    labels = cluster(vectors)
    assert labels == cluster(vectors)
    assert labels == [0] * 8 + [1] * 10 + [2] * 7
    assert cluster(vectors[:4]) == [0] * 4  # too few facts for more than one topic


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> VectorStore:
    return EdgeShards(tmp_path_factory.mktemp("store"), [units_spec(8), views_spec(8)]).get(0)


def summarise(
    windows: list[WindowClosed], failures: dict[str, int], store: VectorStore
) -> tuple[dict[str, Memory], list[str]]:
    """The summary and retry agents' real handlers (streams/handlers.py) on one partition, with
    ``failures[window_id]`` times the LLM down for a window: its deferral goes to the deferred
    topic and, once due, back to the windows topic, after the windows already there. The
    memories the indexer would hold, and the months whose durative memory was scheduled."""
    left = dict(failures)
    windows_topic = deque(received(WINDOWS, w.key, w.to_bytes()) for w in windows)
    deferred_topic: list[Incoming] = []
    memories: dict[str, Memory] = {}
    months: list[str] = []
    states: dict[bytes, Any] = {}

    async def summarize(
        _: VectorStore, state: TreeState, window: WindowClosed
    ) -> tuple[TreeState, list[MemoryUpdate]]:
        """The tree summarizer with a stand-in text (``build``), the LLM down as told."""
        if left.get(window.window_id, 0) > 0:
            left[window.window_id] -= 1
            raise LLMUnavailable("summary", 3, ConnectionError("down"))
        state, node, linked = build(state, window)
        return state, [upsert(n) for n in (node, *linked) if n is not None]

    async def no_durative(_: VectorStore, window: WindowClosed) -> list[MemoryUpdate]:
        raise AssertionError("no durative job is due within the test")

    async def publish(*decisions: Decision) -> None:
        """The topics, as far as these agents go."""
        for d in decisions:
            assert isinstance(d, Done | Deferral), d
            if isinstance(d, Deferral):
                deferred_topic.append(received(DEFERRED, d.work.key, d.work.to_bytes()))
                continue
            for s in d.sends:
                if s.topic == WINDOWS.name:
                    windows_topic.append(received(WINDOWS, s.key.decode(), s.value))
                else:
                    job = Deferred.from_bytes(s.value)
                    assert s.topic == DEFERRED.name and job.source_topic == DURATIVE
                    months.append(WindowClosed.from_bytes(job.value).window_id)
            memories.update({u.memory_id: u.memory for u in d.updates if u.memory is not None})

    barrier = ReadYourWrites(Takeover(Settings(), MEMORY_UPDATES.name), OwnWrites())
    step = Consolidating(lambda _: store, barrier, lambda _: None, lambda: False, time.time, 0.0)
    summaries = Summaries(step, summarize, states, publish, durative_delay_s=3600)
    retries = Retries(step, no_durative)

    async def agents() -> None:
        while windows_topic or deferred_topic:
            if not windows_topic:  # the deferred windows are due
                for r in deferred_topic:
                    await publish(await retries.deferred(r))
                deferred_topic.clear()
            await summaries.window(windows_topic.popleft())

    asyncio.run(agents())
    state = TreeState.from_json(states[b"t/u"])
    assert state.deferred is None and not state.parked
    return memories, months


def received(topic: TopicSpec, key: str, value: bytes) -> Incoming:
    return Incoming.read(key.encode(), value, topic.name, partition=0, offset=0, timestamp=None)


@settings(max_examples=60, deadline=None)
@given(sessions, st.data())
def test_windows_parked_behind_a_deferred_one_give_the_tree_as_if_none_was_deferred(
    store: VectorStore, spec: list[tuple[int, int, int]], data: st.DataObject
) -> None:
    """Without parking, a day summarised before its deferred session has no child for it, and the
    session is swept into a later day."""
    windows = windows_for(spec)
    ids = [w.window_id for w in windows]
    failures = data.draw(st.dictionaries(st.sampled_from(ids), st.integers(1, 3), max_size=5))
    assert summarise(windows, failures, store) == summarise(windows, {}, store)


def test_parking_keeps_the_order_once_per_window_and_round_trips() -> None:
    a, b, c = windows_for([(30, 2, 5)] * 2)[:3]
    state = defer(TreeState(), a)
    assert not waits(state, a) and waits(state, b)
    state = park(park(park(state, b), c), b)  # a redelivered copy is not parked twice
    assert [w.window_id for w in state.parked] == [b.window_id, c.window_id]
    assert TreeState.from_json(state.to_json()) == state
    nxt, state = unpark(state)
    assert nxt == b and state.deferred is None and state.parked == [c]
    assert TreeState.from_json({"pending": {}, "history": {}}) == TreeState()  # state written before

"""The Temporal Memory Tree (TiMem), as a pure state machine over closed windows.

Each user's tree state holds the nodes built but not yet taken by a parent (``pending``), the
w most recent nodes of each level (``history``), and the latest profile. A closed window
becomes one node:

    session closed -> session node (level 2) from the session's units
    day closed     -> day node (3)     from the pending sessions that started that day
    week closed    -> week node (4)    from the pending days that started that week
    month closed   -> profile (5)      from the pending weeks that started that month, refining
                                        the previous profile

Windows must be summarised in the order they closed: a day summarised before one of its sessions
has no child for it, and the session would later be swept into the next day. So while a window's
summary is deferred (LLM down, budget spent, a rebalance), the user's later windows are parked in
the state, in order, and summarised right after it.

Children are the *pending* nodes, not an index lookup, so a parent never misses a child that
is still on its way to the ``memories`` collection. A session can run past midnight and an ISO
week can straddle two months; a node's interval is therefore the hull of its window and its
children's intervals, which makes the containment invariant (a parent covers its children)
hold by construction.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from memstream.schemas.events import WindowClosed, WindowLevel
from memstream.schemas.memory import Memory, MemoryKind, memory_id

HISTORY = 3  # TiMem's w: same-level nodes shown to the writer for continuity

KIND: dict[WindowLevel, MemoryKind] = {
    WindowLevel.SESSION: MemoryKind.SESSION,
    WindowLevel.DAY: MemoryKind.DAY,
    WindowLevel.WEEK: MemoryKind.WEEK,
    WindowLevel.MONTH: MemoryKind.PROFILE,
}
CHILD: dict[MemoryKind, MemoryKind] = {
    MemoryKind.DAY: MemoryKind.SESSION,
    MemoryKind.WEEK: MemoryKind.DAY,
    MemoryKind.PROFILE: MemoryKind.WEEK,
}


@dataclass
class TreeState:
    pending: dict[MemoryKind, list[Memory]] = field(default_factory=dict)
    history: dict[MemoryKind, list[Memory]] = field(default_factory=dict)
    deferred: str | None = None  # the window id whose summary is deferred, if any
    parked: list[WindowClosed] = field(default_factory=list)  # later windows, in order
    # The latest window built per level (start, window id). A user's windows of one level close
    # in start order, so a window not after it was built already: redelivered after a crash or a
    # rebalance, when the state (changelogged) had moved on but the topic offset was not
    # committed. Built again it would see itself and later nodes as history, and a session taken
    # by its day would become pending again, for the next day to take a second time.
    built: dict[MemoryKind, tuple[datetime, str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        def dump(nodes: dict[MemoryKind, list[Memory]]) -> dict[str, list[dict[str, Any]]]:
            return {k.value: [n.model_dump(mode="json") for n in v] for k, v in nodes.items()}

        return {
            "pending": dump(self.pending),
            "history": dump(self.history),
            "deferred": self.deferred,
            "parked": [w.model_dump(mode="json") for w in self.parked],
            "built": {k.value: [start.isoformat(), wid] for k, (start, wid) in self.built.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TreeState:
        def load(nodes: dict[str, list[dict[str, Any]]]) -> dict[MemoryKind, list[Memory]]:
            return {MemoryKind(k): [Memory.model_validate(n) for n in v] for k, v in nodes.items()}

        return cls(
            pending=load(data.get("pending", {})),
            history=load(data.get("history", {})),
            deferred=data.get("deferred"),
            parked=[WindowClosed.model_validate(w) for w in data.get("parked", [])],
            built={
                MemoryKind(k): (datetime.fromisoformat(start), wid)
                for k, (start, wid) in data.get("built", {}).items()
            },
        )


def waits(state: TreeState, window: WindowClosed) -> bool:
    """Whether the window must wait: an earlier window of the user is deferred."""
    return state.deferred is not None and state.deferred != window.window_id


def park(state: TreeState, window: WindowClosed) -> TreeState:
    """The window set aside behind the deferred one (once: a redelivered copy is not parked again)."""
    if any(w.window_id == window.window_id for w in state.parked):
        return state
    return replace(state, parked=[*state.parked, window])


def defer(state: TreeState, window: WindowClosed) -> TreeState:
    return replace(state, deferred=window.window_id)


def unpark(state: TreeState) -> tuple[WindowClosed | None, TreeState]:
    """Once the deferred window is done with: the next parked window to summarise, if any."""
    if not state.parked:
        return None, replace(state, deferred=None)
    return state.parked[0], replace(state, deferred=None, parked=state.parked[1:])


Attempt = Callable[[TreeState, WindowClosed], Awaitable[tuple[bool, TreeState]]]


async def in_closing_order(state: TreeState, window: WindowClosed, summarise: Attempt) -> TreeState:
    """The state after ``window`` arrived: parked while an earlier window is deferred; else
    summarised, then the windows parked behind it, in order, until one is deferred in turn.
    ``summarise`` returns whether the window is done with (summarised, or dropped) and the state
    after it; a window not done with is deferred here."""
    if waits(state, window):
        return park(state, window)
    while True:
        done, state = await summarise(state, window)
        if not done:
            return defer(state, window)
        parked, state = unpark(state)
        if parked is None:
            return state
        window = parked


@dataclass(frozen=True)
class Plan:
    """What to build for one closed window."""

    kind: MemoryKind
    node_id: str
    children: list[Memory]  # pending children (empty for a session: its children are units)
    history: list[Memory]  # the w most recent nodes of the same level, oldest first
    previous: Memory | None  # the latest profile (profiles only)


def node_id(window: WindowClosed) -> str:
    return memory_id("tree", KIND[window.level].value, window.window_id)


def plan(state: TreeState, window: WindowClosed) -> Plan | None:
    """What to build for ``window``; None when it was built already (see ``TreeState.built``)."""
    kind = KIND[window.level]
    latest = state.built.get(kind)
    if latest is not None and (window.start < latest[0] or window.window_id == latest[1]):
        return None
    children: list[Memory] = []
    if kind in CHILD:
        children = sorted(
            (n for n in state.pending.get(CHILD[kind], []) if n.start < window.end),
            key=lambda n: (n.start, n.memory_id),
        )
    history = state.history.get(kind, [])[-HISTORY:]
    previous = history[-1] if kind == MemoryKind.PROFILE and history else None
    return Plan(kind, node_id(window), children, history, previous)


def hull(
    start: datetime, end: datetime, intervals: list[tuple[datetime, datetime | None]]
) -> tuple[datetime, datetime]:
    """The smallest interval covering [start, end) and every child interval."""
    for s, e in intervals:
        start = min(start, s)
        end = max(end, e if e is not None else s)
    return start, end


def apply(
    state: TreeState, window: WindowClosed, node: Memory, children: list[Memory]
) -> tuple[TreeState, list[Memory]]:
    """The state after ``node`` was built for ``window`` from ``children``, and the children with
    their parent link set (to be upserted again). Idempotent: applying the same node twice changes
    nothing more."""
    taken = {c.memory_id for c in children}
    pending = {k: [n for n in v if n.memory_id not in taken] for k, v in state.pending.items()}
    pending[node.kind] = [n for n in pending.get(node.kind, []) if n.memory_id != node.memory_id] + [node]
    if node.kind == MemoryKind.PROFILE:
        pending.pop(MemoryKind.PROFILE)  # a profile is no one's child: it is kept as history only
    same = [n for n in state.history.get(node.kind, []) if n.memory_id != node.memory_id] + [node]
    history = {**state.history, node.kind: same[-HISTORY:]}
    linked = [replace_parent(c, node.memory_id) for c in children]
    built = {**state.built, node.kind: (window.start, window.window_id)}
    return replace(state, pending=pending, history=history, built=built), linked


def replace_parent(child: Memory, parent_id: str) -> Memory:
    return child.model_copy(update={"parent_id": parent_id})


def covers(parent: Memory, child: Memory) -> bool:
    """The containment invariant, for tests and checks."""
    parent_end = parent.end if parent.end is not None else parent.start
    child_end = child.end if child.end is not None else child.start
    return parent.start <= child.start and child_end <= parent_end

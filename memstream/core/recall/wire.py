"""A recall asked of another process, and its answer, as JSON values (the one place they are
(de)serialised; the recall itself is :func:`memstream.core.recall.engine.recall`).

With the embedded store only the worker that holds a user's shard may open it, so the gateway asks
that worker for the whole recall in one request (``memstream.embedded_store.remote_recall``) rather
than for each store call: it sends an :class:`~memstream.core.recall.engine.Ask`, with the query
already embedded so the worker that ingests does no embedding for it, and gets back the
:class:`~memstream.core.recall.engine.Recalled`.
Datetimes travel as ISO 8601 with their offset (instants are kept; a zone becomes its offset), scores
as floats; ``recalled_from_wire(recalled_to_wire(r)) == r``. The decoders raise ValueError on a value
of the wrong shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast, get_args
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt

from memstream.core.recall import rank
from memstream.core.recall.engine import Ask, Recalled
from memstream.core.recall.time_intent import Interval, Relation, TimeIntent

T = TypeVar("T")


def ask_to_wire(ask: Ask) -> dict[str, Any]:
    out: dict[str, Any] = {
        "user_key": ask.user_key,
        "query": ask.query,
        "now": ask.now.isoformat(),
        "budget_tokens": ask.budget_tokens,
        "zone": ask.zone,
        "levels": None if ask.levels is None else list(ask.levels),
    }
    if ask.vector is not None:
        out["vector"] = ask.vector.tolist()
    return out


def ask_from_wire(raw: Any) -> Ask:
    return _decoding("recall request", _ask_in, raw)


def recalled_to_wire(recalled: Recalled) -> dict[str, Any]:
    intent = recalled.intent
    return {
        "items": [[_item_out(item), float(score)] for item, score in recalled.items],
        "context": recalled.context,
        "intent": {
            "intervals": [[iv.start.isoformat(), iv.end.isoformat()] for iv in intent.intervals],
            "relation": intent.relation,
            "asks_change": intent.asks_change,
            "expressions": list(intent.expressions),
        },
        "complexity": recalled.complexity,
    }


def recalled_from_wire(raw: Any) -> Recalled:
    return _decoding("recall answer", _recalled_in, raw)


# --- decoding -------------------------------------------------------------------------------------------


def _decoding(what: str, decode: Callable[[Any], T], raw: Any) -> T:
    try:
        return decode(raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # ZoneInfoNotFoundError is a KeyError
        raise ValueError(f"malformed {what}: {exc!r}") from exc


def _ask_in(raw: Mapping[str, Any]) -> Ask:
    now = _time(raw["now"])
    if now.utcoffset() is None:
        raise ValueError("now must carry its offset")
    levels = raw.get("levels")
    vector = raw.get("vector")
    zone = _of(str, raw.get("zone", "UTC"))
    ZoneInfo(zone)  # known, before any work
    return Ask(
        user_key=_of(str, raw["user_key"]),
        query=_of(str, raw["query"]),
        now=now,
        budget_tokens=_int(raw.get("budget_tokens", 1000)),
        zone=zone,
        levels=None if levels is None else tuple(_int(v) for v in _of(list, levels)),
        vector=None if vector is None else _vector(vector),
    )


def _recalled_in(raw: Mapping[str, Any]) -> Recalled:
    intent = raw["intent"]
    relation = _of(str, intent["relation"])
    complexity = _of(str, raw["complexity"])
    if relation not in get_args(Relation) or complexity not in get_args(rank.Complexity):
        raise ValueError(f"unknown relation {relation!r} or complexity {complexity!r}")
    return Recalled(
        items=[(_item_in(item), float(score)) for item, score in _of(list, raw["items"])],
        context=_of(str, raw["context"]),
        intent=TimeIntent(
            intervals=tuple(Interval(_time(s), _time(e)) for s, e in intent["intervals"]),
            relation=cast(Relation, relation),
            asks_change=_of(bool, intent["asks_change"]),
            expressions=tuple(_of(str, e) for e in intent["expressions"]),
        ),
        complexity=cast(rank.Complexity, complexity),
    )


def _item_out(item: rank.Item) -> dict[str, Any]:
    return {
        "id": item.id,
        "kind": item.kind,
        "level": item.level,
        "text": item.text,
        "start": item.start.isoformat(),
        "end": None if item.end is None else item.end.isoformat(),
        "recorded_at": item.recorded_at.isoformat(),
        "source_turn_ids": list(item.source_turn_ids),
        "parent_id": item.parent_id,
        "children": list(item.children),
        "current": item.current,
        "dense": float(item.dense),
        "session_id": item.session_id,
        "covers_turn_ids": list(item.covers_turn_ids),
        "event_times": [[s.isoformat(), e.isoformat(), g] for s, e, g in item.event_times],
        "brief": item.brief,
    }


def _item_in(raw: Mapping[str, Any]) -> rank.Item:
    end, parent, session = raw["end"], raw["parent_id"], raw["session_id"]
    return rank.Item(
        id=_of(str, raw["id"]),
        kind=_of(str, raw["kind"]),
        level=_int(raw["level"]),
        text=_of(str, raw["text"]),
        start=_time(raw["start"]),
        end=None if end is None else _time(end),
        recorded_at=_time(raw["recorded_at"]),
        source_turn_ids=_strings(raw["source_turn_ids"]),
        parent_id=None if parent is None else _of(str, parent),
        children=_strings(raw["children"]),
        current=_of(bool, raw["current"]),
        dense=float(raw["dense"]),
        session_id=None if session is None else _of(str, session),
        covers_turn_ids=_strings(raw["covers_turn_ids"]),
        event_times=tuple((_time(s), _time(e), _of(str, g)) for s, e, g in raw["event_times"]),
        brief=_of(str, raw.get("brief", "")),  # a worker from before briefs sends none
    )


def _of(kind: type[T], value: Any) -> T:
    if not isinstance(value, kind):
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("expected int, got bool")
    return _of(int, value)


def _time(value: Any) -> datetime:
    return datetime.fromisoformat(_of(str, value))


def _strings(values: Any) -> tuple[str, ...]:
    return tuple(_of(str, v) for v in _of(list, values))


def _vector(values: Sequence[Any]) -> npt.NDArray[np.float32]:
    vector = np.asarray(_of(list, values), dtype=np.float32)
    if vector.ndim != 1 or not len(vector):
        raise ValueError("vector must be a non-empty list of numbers")
    return vector

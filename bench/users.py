"""Many-user sets for the consolidation benches, built from a few real conversations by renaming users.

Copy ``i`` (``u0000``, ``u0001``, ...) replays source user ``i mod sources``: the same turns, in the
same order, with the same timestamps, under a new user id (and session ids that name it), so each
copy is consolidated as a user of its own. Copies are interleaved turn by turn (every user's first
turn, then every user's second turn, ...), as many users talking at once would arrive; one user's
turns stay in order.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import zip_longest
from pathlib import Path
from typing import Any, Literal

from memstream.apps.datasets import RawRecord, read_records
from memstream.apps.sample_conversations import generate
from memstream.schemas.events import Turn

Source = Literal["locomo", "sample"]


def renamed(record: RawRecord, user_id: str) -> RawRecord:
    """``record`` (a valid turn) as said by ``user_id``; its session id names the new user too, so
    two copies never share a session."""
    turn = Turn.from_bytes(record.value)
    session = turn.session_id.replace(turn.user_id, user_id, 1)
    if session == turn.session_id:
        session = f"{user_id}:{turn.session_id}"
    copy = Turn.model_validate({**turn.model_dump(), "user_id": user_id, "session_id": session})
    return RawRecord(copy.key, copy.to_bytes())


def many_users(
    records: Iterable[RawRecord], users: int, turns_per_user: int | None = None
) -> list[RawRecord]:
    """``users`` renamed copies of the users of ``records`` (in order of first appearance), each
    with at most its first ``turns_per_user`` turns (None: all), interleaved turn by turn."""
    if users < 1:
        raise ValueError("users must be at least 1")
    by_user: dict[str | None, list[RawRecord]] = {}
    for record in records:
        by_user.setdefault(record.key, []).append(record)
    sources = [turns[:turns_per_user] for turns in by_user.values()]
    if not sources:
        raise ValueError("no records to copy")
    copies = [[renamed(r, f"u{i:04d}") for r in sources[i % len(sources)]] for i in range(users)]
    return [r for round_ in zip_longest(*copies) for r in round_ if r is not None]


def source_records(source: Source, data: Path | None = None) -> list[RawRecord]:
    """The conversations to copy: the LoCoMo-format file ``data``, or the sample set as
    ``memstream sample`` writes it by default (5 users, 45 days, seed 7)."""
    if source == "locomo":
        if data is None:
            raise ValueError("the locomo source needs a file")
        return list(read_records(data, "locomo"))
    return [RawRecord(t.key, t.to_bytes()) for t in generate()]


def sessions(records: Iterable[RawRecord]) -> int:
    """Distinct sessions (user and session id) of ``records`` (valid turns): each ends in at least
    one closed session window."""
    return len({(r.key, Turn.from_bytes(r.value).session_id) for r in records})


def sessions_closed(status: dict[str, Any], count: int) -> bool:
    """Whether a pipeline's ``/status`` counts at least ``count`` session windows closed, for any reason."""
    closed = status.get("memstream_windows_closed", {})
    return sum(n for label, n in closed.items() if label.startswith("session/")) >= count

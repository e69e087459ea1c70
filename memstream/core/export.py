"""A user's data as JSON Lines (``GET /v1/users/{id}/export``): pure.

Turn lines are turns in the shape ``POST /v1/turns`` and ``memstream replay --format jsonl`` take,
so an export re-imports as it is; memory lines (``{"memory": {...}}``) are the consolidated memories
with their provenance, for the user to read (a replay skips them: the pipeline consolidates the
turns again).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import orjson

from memstream.schemas.events import Message, Role, Turn, Unit
from memstream.schemas.memory import Memory

MEMORY_LINE = "memory"


def messages_of(unit: Unit) -> list[Message]:
    """The messages of a stored unit, from its ``speaker: content`` lines: a line that starts with
    one of the unit's speakers and ": " begins a message, any other line continues the one before.
    Roles are not stored (nothing downstream reads them): the first speaker's messages are the
    user's, the others the assistant's."""
    out: list[tuple[str, list[str]]] = []
    for line in unit.text.split("\n"):
        speaker = next((s for s in unit.speakers if line.startswith(f"{s}: ")), None)
        if speaker is not None or not out:
            speaker = speaker or (unit.speakers[0] if unit.speakers else "user")
            out.append((speaker, [line.removeprefix(f"{speaker}: ")]))
        else:
            out[-1][1].append(line)
    # A turn holds at most two messages: a content line that merely looked like a third one
    # goes back into the second, as it was.
    for speaker, lines in out[2:]:
        out[1][1].extend([f"{speaker}: {lines[0]}", *lines[1:]])
    del out[2:]
    first = unit.speakers[0] if unit.speakers else None
    return [
        Message(speaker=s, role=Role.USER if s == first else Role.ASSISTANT, content="\n".join(lines))
        for s, lines in out
    ]


def turn_of(unit: Unit) -> Turn:
    return Turn(
        tenant=unit.tenant,
        user_id=unit.user_id,
        session_id=unit.session_id,
        turn_id=unit.turn_id,
        ts=unit.ts,
        timezone=unit.timezone,
        messages=messages_of(unit),
    )


def export_lines(units: Iterable[Unit], memories: Iterable[Memory]) -> Iterator[bytes]:
    """The user's turns by dialogue time, then their memories by start: one JSON object a line."""
    for unit in sorted(units, key=lambda u: (u.ts, u.turn_id)):
        yield turn_of(unit).to_bytes() + b"\n"
    for memory in sorted(memories, key=lambda m: (m.start, m.level, m.memory_id)):
        yield orjson.dumps({MEMORY_LINE: orjson.Fragment(memory.to_bytes())}) + b"\n"


def is_memory_line(record: object) -> bool:
    return isinstance(record, dict) and set(record) == {MEMORY_LINE}

"""Readers that turn conversation files into ``Turn`` records (or raw lines) for replay.

* ``jsonl``: one ``Turn`` JSON object per line. Lines are replayed as raw bytes so the
  processor, not the reader, decides what is valid (bad lines end in the dead-letter topic).
* ``locomo``: the LoCoMo benchmark format. Each conversation becomes one user; each dialogue
  turn becomes one ``Turn`` whose ``turn_id`` is the dataset's ``dia_id``; speaker_a plays the
  ``user`` role, speaker_b the ``assistant`` role. Turns of a session get the session's
  ``date_time`` plus 30 s per turn, so they stay ordered and the session reads as one sitting.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import orjson

from memstream.core.export import is_memory_line
from memstream.schemas.events import DEFAULT_TENANT, Message, Role, Turn, partition_key

Format = Literal["jsonl", "locomo"]

_LOCOMO_TIME = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})\s*$", re.I)
_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        [
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ]
    )
}
TURN_SPACING = timedelta(seconds=30)


@dataclass(frozen=True)
class RawRecord:
    """What replay produces: the key (tenant/user) if known, and the value bytes."""

    key: str | None
    value: bytes


def parse_locomo_time(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` -> naive datetime (LoCoMo gives no zone)."""
    m = _LOCOMO_TIME.match(text)
    if not m:
        raise ValueError(f"unrecognised LoCoMo date_time {text!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    return datetime(int(year), _MONTHS[month.lower()], int(day), h, int(minute))


def session_numbers(conversation: dict[str, Any]) -> list[int]:
    # Some session_N_date_time keys have no turns: only list-valued session_N count.
    nums = [
        int(k.split("_")[1])
        for k, v in conversation.items()
        if re.fullmatch(r"session_\d+", k) and isinstance(v, list) and v
    ]
    return sorted(nums)


def locomo_turns(path: Path, tenant: str = DEFAULT_TENANT) -> Iterator[Turn]:
    data = orjson.loads(path.read_bytes())
    for sample in data:
        conv = sample["conversation"]
        roles = {conv["speaker_a"]: Role.USER, conv["speaker_b"]: Role.ASSISTANT}
        user_id = sample["sample_id"]
        for n in session_numbers(conv):
            start = parse_locomo_time(conv[f"session_{n}_date_time"])
            for i, turn in enumerate(conv[f"session_{n}"]):
                content = turn["text"]
                if turn.get("blip_caption"):
                    content = f"{content} [shares a photo: {turn['blip_caption']}]"
                yield Turn(
                    tenant=tenant,
                    user_id=user_id,
                    session_id=f"{user_id}:session_{n}",
                    turn_id=turn["dia_id"],
                    ts=start + i * TURN_SPACING,
                    messages=[
                        Message(
                            speaker=turn["speaker"],
                            role=roles.get(turn["speaker"], Role.USER),
                            content=content,
                        )
                    ],
                )


def _jsonl_records(path: Path) -> Iterator[RawRecord]:
    """Each line as it is, keyed by its user; the memory lines of an export are skipped (the
    pipeline consolidates the turns again)."""
    with path.open("rb") as fh:
        for line in fh:
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                obj = None
            if not is_memory_line(obj):
                yield RawRecord(key=_key_of(obj), value=line)


def _key_of(obj: object) -> str | None:
    try:
        return partition_key(str(obj["tenant"]), str(obj["user_id"]))  # type: ignore[index]
    except (KeyError, TypeError):
        return None  # still replayed: the processor dead-letters it with the reason


def read_records(path: Path, fmt: Format, tenant: str = DEFAULT_TENANT) -> Iterator[RawRecord]:
    """Records to produce to the turns topic, in file order; ``tenant`` for formats whose records name none
    (locomo), by default the tenant a gateway without API keys reads."""
    if fmt == "jsonl":
        yield from _jsonl_records(path)
    else:
        for turn in locomo_turns(path, tenant=tenant):
            yield RawRecord(key=turn.key, value=turn.to_bytes())


def read_turns(path: Path, fmt: Format, tenant: str = DEFAULT_TENANT) -> Iterator[Turn]:
    """Valid turns only (for calibration and evaluation); invalid jsonl lines raise."""
    if fmt == "locomo":
        yield from locomo_turns(path, tenant=tenant)
    else:
        for rec in _jsonl_records(path):
            yield Turn.from_bytes(rec.value)

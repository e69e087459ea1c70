"""Sentences written back out: standalone, or as one narrative naming dates and speakers once."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from zoneinfo import ZoneInfo

from memstream.consumers.extractive.sentences import Sentence
from memstream.core.dates import render_date


def _terminated(text: str) -> str:
    # Each rendered sentence ends its sentence, so a narrative splits back into the same sentences.
    return text if re.search(r"[.!?…][\"')\]”’]*$", text) else f"{text}."


def render(s: Sentence, zone: ZoneInfo, *, with_day: bool = True) -> str:
    """One standalone sentence, e.g. ``On 8 May 2023, Caroline: I went ... yesterday (7 May 2023).``"""
    day = f"On {render_date(s.ts, zone)}, " if with_day and s.dated else ""
    speaker = f"{s.speaker}: " if s.speaker else ""
    return f"{day}{speaker}{_terminated(s.anchored)}"


def narrate(chosen: Sequence[Sentence], zone: ZoneInfo) -> str:
    """The sentences as one paragraph, grouped by day and within a day by speaker (in the order they
    first spoke), naming the date and the speaker only when they change."""
    groups: dict[tuple[str | None, str | None], list[Sentence]] = {}
    for s in chosen:
        groups.setdefault((render_date(s.ts, zone) if s.dated else None, s.speaker), []).append(s)
    out: list[str] = []
    previous: tuple[str | None, str | None] = (None, None)
    for (day, speaker), said in sorted(groups.items(), key=lambda g: _first_day(g[1], groups)):
        for s in said:
            new_day = day is not None and day != previous[0]
            label = f"{speaker}: " if speaker and (new_day or speaker != previous[1]) else ""
            out.append((f"On {day}, " if new_day else "") + label + _terminated(s.anchored))
            previous = (day or previous[0], speaker)
    return " ".join(out)


def _first_day(
    said: list[Sentence], groups: dict[tuple[str | None, str | None], list[Sentence]]
) -> tuple[tuple[datetime, int, int], tuple[datetime, int, int]]:
    """A group's place: its day's first sentence, then its own first sentence."""
    day = next(key[0] for key, group in groups.items() if group is said)
    opening = min(s.order for key, group in groups.items() if key[0] == day for s in group)
    return opening, said[0].order

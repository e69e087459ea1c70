"""A stand-in for a chat model behind ``memstream/testing/openai_server.py``: it answers memstream's prompts
(``memstream.core.prompts``) with valid JSON built from the prompt's own data, so the LLM path runs end
to end over real HTTP with real ``usage``. Deterministic; not a language model: its texts are
the data's first lines, and it cites the ids of the sources whose lines its text quotes (as the
prompts ask). Used by the tests and by ``bench/consolidation.py``.
"""

from __future__ import annotations

import json
import re
from typing import Any

_ID = re.compile(r"^\[([0-9a-f-]{36})\] (\d{4}-\d{2}-\d{2})", re.MULTILINE)
_DATA = re.compile(r"<data>\n(.*?)\n</data>", re.DOTALL)


def respond(body: dict[str, Any]) -> str:
    system = body["messages"][0]["content"]
    user = body["messages"][-1]["content"]
    if len(body["messages"]) > 2:  # a repair request: answer the same stage again
        user = body["messages"][1]["content"]
    data = _DATA.findall(user)
    items = _ID.findall(user)
    ids = [i for i, _ in items]
    dates = sorted(d for _, d in items) or ["2024-01-01"]
    text = (
        " ".join(line for block in data for line in block.splitlines() if ": " in line)[:400]
        or "Nothing new."
    )
    cited = quoted_ids(user, text) or ids[:1]
    if "episodic memory" in system:
        answer: dict[str, Any] = {
            "episodes": [
                {"text": f"On {dates[0]}: {text}", "start": dates[0], "end": dates[-1], "unit_ids": cited}
            ]
        }
    elif "semantic memory" in system:
        answer = {
            "facts": [
                {
                    "sentence": f"On {d}, {line}",
                    "subject": "user",
                    "predicate": "said",
                    "object": line[:120],
                    "type": "user_event",
                    "valid_from": d,
                    "valid_to": None,
                    "unit_ids": [i],
                    "supersedes": [],
                }
                for (i, d), line in zip(items, _first_lines(user), strict=False)
            ][:3]
        }
    elif "durative memory" in system:
        persona = text[:200]
        answer = {
            "topic": f"Topic: {text}",
            "persona": f"Persona: {persona}",
            "topic_ids": cited,
            "persona_ids": quoted_ids(user, persona) or ids[:1],
        }
    elif "answer a question" in system:
        first = next((line for block in data for line in block.splitlines() if line.strip()), "")
        answer = {"answer": f"From memory: {first[:300]}" if first else "The memories do not say."}
    elif "profile" in system:
        answer = {"profile": f"Profile: {text}", "source_ids": cited}
    else:
        answer = {"summary": f"Summary: {text}", "source_ids": cited}
    return json.dumps(answer)


def quoted_ids(user: str, text: str) -> list[str]:
    """The ids of the id-tagged blocks of ``user`` with a speaker line whose start is in ``text``."""
    tags = list(_ID.finditer(user))
    ends = [t.start() for t in tags[1:]] + [len(user)] if tags else []
    out = []
    for tag, end in zip(tags, ends, strict=True):
        block = user[tag.end() : end]
        lines = [ln.strip() for ln in block.split("</data>")[0].splitlines() if ": " in ln]
        if any(ln[:40] in text for ln in lines):
            out.append(tag[1])
    return out


def _first_lines(user: str) -> list[str]:
    """The first speaker line after each id tag."""
    out = []
    for block in re.split(r"^\[[0-9a-f-]{36}\] .*$", user, flags=re.MULTILINE)[1:]:
        lines = [ln for ln in block.strip().splitlines() if ": " in ln]
        out.append(lines[0][:200] if lines else "something")
    return out

"""Reading a model's answer: the one JSON object in it, wherever the model put it.

Servers without a response format (and some with one) wrap the JSON in a code fence or in a
sentence ("Here is the JSON: ..."). Pure functions, so the client stays a thin shell.
"""

from __future__ import annotations

import json
import re

_FENCE = re.compile(r"```[A-Za-z0-9_-]*")  # an opening fence, its language tag included
_DECODER = json.JSONDecoder()


def json_object_text(answer: str) -> str:
    """The text of the first JSON object in ``answer``: the first after an opening code fence if it
    has one, else the first ``{`` that starts a complete object. ``answer`` unchanged when there is
    none, so that validation reports what the model actually said."""
    fence = _FENCE.search(answer)
    found = _first_object(answer, fence.end()) if fence is not None else None
    return found or _first_object(answer, 0) or answer


def _first_object(text: str, pos: int) -> str | None:
    # Decoding (not a regex) finds the object's end: braces and fences inside its strings are data.
    start = text.find("{", pos)
    while start != -1:
        try:
            value, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            pass
        else:
            if isinstance(value, dict):
                return text[start:end]
        start = text.find("{", start + 1)
    return None

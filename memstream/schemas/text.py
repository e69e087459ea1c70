"""Text a client sends must be Unicode that UTF-8 can write.

JSON can spell a lone surrogate (``"\\ud800"``) and Python's json module, which parses the
gateway's request bodies, accepts one; pydantic refuses it only in fields with constraints. Let
through, it fails far from the request (orjson and UTF-8 refuse to write it), as a 500.
:func:`unicode_only` refuses it where it comes in, in any field of a request model, nested values
and keys included. Records read from a topic are parsed by pydantic's own JSON parser, which
refuses the escape: the ingest processor dead-letters them as ``malformed_json``.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import PydanticCustomError


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _bad_text_at(value: Any) -> str | None:
    """The dotted path of the first string in ``value`` UTF-8 cannot write ("" for ``value``
    itself), or None. A loop, not recursion: a body may nest as deep as the JSON parser allows."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, str):
            if not v.isascii() and not _encodable(v):
                return path
        elif isinstance(v, dict):
            for key, item in v.items():
                stack.append((f"{path}.{key}" if path else str(key), item))
                stack.append((path, key))  # checked first, where its dict is: a path never holds a bad key
        elif isinstance(v, list | tuple):
            stack.extend((f"{path}.{i}" if path else str(i), item) for i, item in enumerate(v))
    return None


def unicode_only(value: Any) -> Any:
    """``value``, refused with the error type pydantic gives a constrained str field (and where in
    the value) when a string in it is not valid Unicode. A ``mode="before"`` field validator."""
    where = _bad_text_at(value)
    if where is None:
        return value
    at = f" at {where!r}" if where else ""
    raise PydanticCustomError(
        "string_unicode", "Input should be valid Unicode text: a lone surrogate{at}", {"at": at}
    )

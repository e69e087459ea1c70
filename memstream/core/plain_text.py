"""Stored text as it may stand in text we lay out for a reader (a recall context, a writer's prompt):
it must not pass for the layout's own lines, headers like "[8 May 2023]" or "[<id>] <date>".

What stored text could use for that: line and paragraph separators, invisible characters that reorder
or hide what follows them (bidi embeddings, overrides, isolates and marks: U+061C, U+200E/F,
U+202A-E, U+2066-9; zero-width characters other than the joiners: U+200B, U+2060, U+FEFF), and a "["
at the start of a line.
"""

from __future__ import annotations

import unicodedata

_INVISIBLE = dict.fromkeys(
    [0x061C, 0x200B, 0x200E, 0x200F, 0x2060, 0xFEFF, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)


def _unbracketed(line: str) -> str:
    # A leading "[", after any other format characters (dropped), is written "\[".
    start = next((i for i, c in enumerate(line) if unicodedata.category(c) != "Cf"), len(line))
    return "\\" + line[start:] if line.startswith("[", start) else line


def plain(text: str) -> str:
    """``text`` folded onto one line (``str.split`` takes every line and paragraph separator as
    whitespace), without the invisible characters, a leading "[" escaped."""
    return _unbracketed(" ".join(text.translate(_INVISIBLE).split()))


def plain_lines(text: str) -> str:
    """``text`` with its lines kept (every separator ``str.splitlines`` knows becomes "\\n"), each
    without the invisible characters and with a leading "[" escaped."""
    return "\n".join(_unbracketed(line) for line in text.translate(_INVISIBLE).splitlines())

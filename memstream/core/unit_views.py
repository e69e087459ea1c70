"""The ``unit_views`` collection: each unit seen two more ways besides its whole-turn vector, so that
recall can score what one sentence of a long turn says, and what a reply means in its exchange
("Yes, since 2016" answers the turn before it). Pure functions, no I/O.

One point per unit, with the unit's id, holding both:

* its **sentence** vectors, as one multivector (``SENTENCES``, compared MaxSim: a query scores the
  unit by its sentence nearest the query): one row per sentence of the unit (``Speaker: sentence``; a
  bracketed aside such as a photo caption is a sentence of its own). A unit of one sentence has one
  row, its whole-turn vector, so it costs the embedder nothing.
* its **context** vector, as the point's dense vector: the unit's vector plus the vector of the unit
  before it in its session, normalised; the unit's own vector when it opens its session. A sum of
  stored vectors, not a new embedding: on LoCoMo dev it kept most of what embedding the two turns
  together gave (text recall 85.2 against 86.1 at 1,000 tokens) at no embedding cost (bench/RESULTS.md).

Until 2026-11-27 each sentence and the context were points of their own (3.7 a unit on the bench's
turns, each with four payload strings): one point a unit, with two, halved what storing the views costs
(167 -> 90 us a turn) and recalls the same on LoCoMo dev (bench/RESULTS.md).

Recall's dense score of a unit mixes its whole-turn cosine with its best sentence's and its context
vector's (``RecallConfig.sentence_weight`` / ``context_weight``); docs/recall.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from memstream.core.sentences import bracketed, split_sentences
from memstream.core.store import CollectionSpec, Point
from memstream.core.units import TENANT_FIELD, USER_FIELD
from memstream.schemas.events import Unit

UNIT_VIEWS = "unit_views"
SENTENCES = "sentences"  # the multivector of a unit's sentences
MAX_SENTENCES = 255  # rows of a unit's sentence multivector at most: the first ones


def views_spec(dim: int) -> CollectionSpec:
    return CollectionSpec(
        name=UNIT_VIEWS,
        dim=dim,
        keyword_fields=(USER_FIELD,),
        tenant_field=TENANT_FIELD,
        multivector=SENTENCES,
    )


def sentence_texts(text: str) -> list[str]:
    """A unit's text (``speaker: content`` lines) as its sentences, each labelled with its speaker;
    ``[text]`` itself when it is one sentence, so its whole-turn vector serves."""
    out: list[str] = []
    for line in text.splitlines():
        speaker, sep, content = line.partition(": ")
        if not sep:
            speaker, content = "", line
        label = f"{speaker}: " if speaker else ""
        out += [label + s for s in split_sentences(content)]
        out += [label + aside for aside in bracketed(content)]
    return out if len(out) > 1 else [text]


def with_sentences(texts: Sequence[str]) -> tuple[list[str], list[list[int]]]:
    """What ingest embeds for units of these texts, in one call: the texts, then the sentences of those
    with more than one; and for each unit the rows of its sentence views (its own row when it is one
    sentence)."""
    out = list(texts)
    rows: list[list[int]] = []
    for i, text in enumerate(texts):
        mine = sentence_texts(text)
        if mine == [text]:
            rows.append([i])
        else:
            rows.append(list(range(len(out), len(out) + len(mine))))
            out += mine
    return out, rows


def context_vector(
    own: npt.NDArray[np.float32], previous: npt.NDArray[np.float32] | None
) -> npt.NDArray[np.float32]:
    """The unit's vector plus the previous unit's in its session, normalised (``own`` if none)."""
    if previous is None:
        return own
    total = own + previous
    norm = float(np.linalg.norm(total))
    return own if norm == 0.0 else (total / norm).astype(np.float32)


def view_point(unit: Unit, sentences: npt.NDArray[np.float32], context: npt.NDArray[np.float32]) -> Point:
    """The unit's view point: its context vector, and its sentence vectors (rows in ``sentence_texts``
    order, the first ``MAX_SENTENCES``) as its multivector. Only the user and tenant in its payload: what
    recall filters and forgetting deletes by; its id is the unit's."""
    payload = {USER_FIELD: unit.key, TENANT_FIELD: unit.tenant}
    return Point(unit.unit_id, context, payload, multi=sentences[:MAX_SENTENCES])

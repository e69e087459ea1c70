"""The ``unit_views`` collection: each unit seen two more ways besides its whole-turn vector, so that
recall can score what one sentence of a long turn says, and what a reply means in its exchange
("Yes, since 2016" answers the turn before it). Pure functions, no I/O.

* **sentence** views: one point per sentence of the unit (``Speaker: sentence``; a bracketed aside
  such as a photo caption is a sentence of its own). A unit of one sentence has one, its whole-turn
  vector, so it costs the embedder nothing.
* **context** view: one point, the unit's vector plus the vector of the unit before it in its
  session, normalised; the unit's own vector when it opens its session. A sum of stored vectors,
  not a new embedding: on LoCoMo dev it kept most of what embedding the two turns together gave
  (text recall 85.2 against 86.1 at 1,000 tokens) at no embedding cost (bench/RESULTS.md).

Recall's dense score of a unit mixes its whole-turn cosine with its best sentence's and its context
view's (``RecallConfig.sentence_weight`` / ``context_weight``); docs/recall.md.
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
VIEW_FIELD = "view"  # SENTENCE or CONTEXT
OF_FIELD = "unit_id"  # the unit a view belongs to
SENTENCE = "sentence"
CONTEXT = "context"
MAX_SENTENCE_VIEWS = 255  # a view's slot is the last byte of its id; slot 0 is the context view


def views_spec(dim: int) -> CollectionSpec:
    return CollectionSpec(name=UNIT_VIEWS, dim=dim, keyword_fields=(USER_FIELD,), tenant_field=TENANT_FIELD)


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


def view_points(
    unit: Unit, sentences: Sequence[npt.NDArray[np.float32]], context: npt.NDArray[np.float32]
) -> list[Point]:
    """The unit's view points: its context view, then its sentence vectors (in ``sentence_texts`` order,
    the first ``MAX_SENTENCE_VIEWS``)."""
    key, tenant, unit_id = unit.key, unit.tenant, unit.unit_id
    context_payload = {USER_FIELD: key, TENANT_FIELD: tenant, OF_FIELD: unit_id, VIEW_FIELD: CONTEXT}
    # One payload for all the unit's sentence views: the store copies a payload when it takes the point.
    sentence_payload = {USER_FIELD: key, TENANT_FIELD: tenant, OF_FIELD: unit_id, VIEW_FIELD: SENTENCE}
    points = [Point(view_id(unit_id, 0), context, context_payload)]
    points += [
        Point(view_id(unit_id, slot), vector, sentence_payload)
        for slot, vector in enumerate(sentences[:MAX_SENTENCE_VIEWS], start=1)
    ]
    return points


def view_id(unit_id: str, slot: int) -> str:
    """The unit's id with its last byte replaced by the view's slot (0: context, 1-255: sentences):
    deterministic, so writing a unit's views again replaces them, and readable back without the payload
    (``unit_prefix``), which a search need not fetch. Two units' views could only meet if their uuid5
    ids agreed in all their other 114 random bits."""
    return f"{unit_id[:-2]}{slot:02x}"


def unit_prefix(id_: str) -> str:
    """What a view's id and its unit's id share (all but the last byte)."""
    return id_[:-2]


def view_slot(view: str) -> int:
    """A view's slot (``view_id``): 0 the context view, from 1 its unit's sentences in order."""
    return int(view[-2:], 16)


def is_context(view: str) -> bool:
    return view.endswith("00")

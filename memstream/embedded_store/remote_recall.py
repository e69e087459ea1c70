"""Recall where the store is: with the embedded store, by the worker that holds the user's shard.

A gateway that reads a partition through its owner (:class:`.remote_store.RemoteStore`) would make
every store call of a recall its own HTTP request (about five). Instead it embeds the query
and sends the whole recall to the owner in one request, ``POST /recall/<partition>`` on the worker's
internal port, with its token (:func:`serve_recall` is the worker's side, ``internal.py`` its
page); the owner is located, and located again on a 409 or an unreachable worker, exactly as for a
store call. Any other store (Qdrant server, a local shard) is read here. The wire values:
``memstream.core.recall.wire``.
"""

from __future__ import annotations

from dataclasses import replace

import orjson

from memstream.core.embedder import Embedder
from memstream.core.recall.engine import Ask, Recalled, recall
from memstream.core.recall.wire import ask_from_wire, ask_to_wire, recalled_from_wire, recalled_to_wire
from memstream.core.store import VectorStore
from memstream.embedded_store.remote_store import RemoteStore


def recall_at(store: VectorStore, embedder: Embedder, ask: Ask) -> Recalled:
    """``ask`` recalled from ``store``: by its owner in one request when ``store`` is remote (the query
    embedded here, unless the ask carries its vector), else in this process."""
    if not isinstance(store, RemoteStore):
        return recall(store, embedder, ask)
    if ask.vector is None:
        ask = replace(ask, vector=embedder.embed([ask.query])[0])
    body = orjson.dumps(ask_to_wire(ask))
    return recalled_from_wire(orjson.loads(store.post(f"/recall/{store.partition}", body)))


def serve_recall(store: VectorStore, embedder: Embedder, body: bytes) -> bytes:
    """The worker's side: run the recall ``body`` asks for on ``store`` (a partition it holds) and encode
    the answer. ValueError on a body that is not a recall request, or a vector of another dimension."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"body is not JSON: {exc}") from exc
    ask = ask_from_wire(raw)
    if ask.vector is not None and ask.vector.shape != (embedder.dim,):
        raise ValueError(f"query vector has {ask.vector.shape[0]} dimensions, the store {embedder.dim}")
    return orjson.dumps(recalled_to_wire(recall(store, embedder, ask)))

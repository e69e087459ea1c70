"""A recall run by the worker that holds the store (``memstream.embedded_store.remote_recall``): the wire
values round-trip (``memstream.core.recall.wire``), one HTTP request per recall, the same answer as
in process, a moved partition followed, a malformed request refused. The gateway end to end:
``tests/test_gateway.py::test_a_recall_is_one_request_to_the_worker``."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, timedelta
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from memstream.adapters import metrics
from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.core.recall.engine import Ask, Recalled, recall
from memstream.core.recall.wire import (
    ask_from_wire,
    ask_to_wire,
    recalled_from_wire,
    recalled_to_wire,
)
from memstream.core.store import VectorStore
from memstream.embedded_store.internal import Recalls
from memstream.embedded_store.read_leases import ReadLeases
from memstream.embedded_store.remote_recall import recall_at, serve_recall
from memstream.embedded_store.remote_store import RemoteStore, serve
from tests.test_consolidation import TURNS

EMBEDDER = HashingEmbedder(384)
USER = TURNS[0].key
NOW = max(t.ts for t in TURNS if t.key == USER).replace(tzinfo=UTC) + timedelta(days=2)
QUERIES = [
    ("Where am I moving to?", None),
    ("What did I do last week?", None),
    ("How did my plans change since March?", (1, 2, 3)),
    ("running", (2,)),
]


def ask(query: str, levels: tuple[int, ...] | None = None, zone: str = "UTC") -> Ask:
    return Ask(user_key=USER, query=query, now=NOW, budget_tokens=400, zone=zone, levels=levels)


@pytest.mark.parametrize(("query", "levels"), QUERIES)
def test_a_recall_round_trips_through_the_wire(sample_memory: VectorStore, query: str, levels: Any) -> None:
    recalled = recall(sample_memory, EMBEDDER, ask(query, levels, zone="Europe/London"))
    assert recalled.items
    wire = orjson.loads(orjson.dumps(recalled_to_wire(recalled)))
    assert recalled_from_wire(wire) == recalled
    back = recalled_from_wire(wire)
    for (a, _), (b, _) in zip(back.items, recalled.items, strict=True):  # the same instants, offsets kept
        assert (a.start.utcoffset(), a.recorded_at.utcoffset()) == (
            b.start.utcoffset(),
            b.recorded_at.utcoffset(),
        )


def test_an_item_keeps_its_brief_on_the_wire_and_a_worker_without_briefs_sends_none(
    sample_memory: VectorStore,
) -> None:
    recalled = recall(sample_memory, EMBEDDER, ask("Where am I moving to?"))
    item, score = recalled.items[0]
    briefed = Recalled(
        [(replace(item, brief="Maya: We live in Lisbon."), score)], "", recalled.intent, "simple"
    )
    wire = orjson.loads(orjson.dumps(recalled_to_wire(briefed)))
    assert recalled_from_wire(wire).items[0][0].brief == "Maya: We live in Lisbon."
    del wire["items"][0][0]["brief"]
    assert recalled_from_wire(wire).items[0][0] == replace(item, brief="")


def test_an_ask_round_trips_and_its_vector_is_used_as_given(sample_memory: VectorStore) -> None:
    vector = EMBEDDER.embed(["Where am I moving to?"])[0]
    sent = Ask(USER, "Where am I moving to?", NOW, 300, "Europe/Paris", (1, 2), vector)
    got = ask_from_wire(orjson.loads(orjson.dumps(ask_to_wire(sent))))
    assert got.vector is not None and got.vector.dtype == np.float32
    assert np.array_equal(got.vector, vector)
    assert (got.user_key, got.query, got.now, got.budget_tokens, got.zone, got.levels) == (
        USER,
        "Where am I moving to?",
        NOW,
        300,
        "Europe/Paris",
        (1, 2),
    )
    # recall with the vector given = recall embedding the query itself
    embedded = recall(
        sample_memory, EMBEDDER, Ask(user_key=USER, query=sent.query, now=NOW, budget_tokens=300)
    )
    given = recall(
        sample_memory,
        EMBEDDER,
        Ask(user_key=USER, query=sent.query, now=NOW, budget_tokens=300, vector=vector),
    )
    assert given == embedded


GOOD = ask_to_wire(ask("moving"))


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        orjson.dumps({k: v for k, v in GOOD.items() if k != "query"}),
        orjson.dumps({**GOOD, "now": "2025-03-01T12:00:00"}),  # no offset
        orjson.dumps({**GOOD, "now": "yesterday"}),
        orjson.dumps({**GOOD, "zone": "Mars/Olympus"}),
        orjson.dumps({**GOOD, "budget_tokens": "many"}),
        orjson.dumps({**GOOD, "levels": [1, "two"]}),
        orjson.dumps({**GOOD, "vector": [[1.0, 2.0]]}),
        orjson.dumps({**GOOD, "vector": [0.5] * 8}),  # another dimension than the store's
    ],
)
def test_a_malformed_recall_request_is_a_value_error(sample_memory: VectorStore, body: bytes) -> None:
    with pytest.raises(ValueError):
        serve_recall(sample_memory, EMBEDDER, body)


# --- over HTTP ---------------------------------------------------------------------------------------------


class _Worker(http.server.HTTPServer):
    """A worker's two pages for a gateway (``/store/<p>/<op>``, ``/recall/<p>``) over real HTTP, one
    request at a time, counting the requests by page; ``owner=False``: answers 409 like a worker the
    partition has moved from."""

    def __init__(self, store: VectorStore, owner: bool = True) -> None:
        self.store, self.owner = store, owner
        self.requests: Counter[str] = Counter()
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Worker

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"] or 0))
        page = self.path.split("/")[1]
        self.server.requests[page] += 1
        try:
            if not self.server.owner:
                status, out = 409, b'{"error": "not held here"}'
            elif page == "recall":
                status, out = 200, serve_recall(self.server.store, EMBEDDER, body)
            else:
                status, out = 200, serve(self.server.store, self.path.rsplit("/", 1)[-1], body)
        except ValueError as exc:
            status, out = 400, orjson.dumps({"error": str(exc)})
        self.send_response(status)
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def worker(sample_memory: VectorStore) -> Iterator[_Worker]:
    w = _Worker(sample_memory)
    yield w
    w.shutdown()
    w.server_close()


@pytest.mark.parametrize(("query", "levels"), QUERIES)
def test_a_remote_recall_is_one_request_with_the_in_process_answer(
    sample_memory: VectorStore, worker: _Worker, query: str, levels: Any
) -> None:
    with httpx.Client(timeout=10) as client:
        remote = RemoteStore(0, lambda partition, refresh: worker.url, client)
        # the old way, every store call a request of its own: the same answer
        assert recall_at(sample_memory, EMBEDDER, ask(query, levels)) == recall(
            remote, EMBEDDER, ask(query, levels)
        )
        assert worker.requests["store"] >= 3 and worker.requests["recall"] == 0
        worker.requests.clear()
        got = recall_at(remote, EMBEDDER, ask(query, levels))
    assert dict(worker.requests) == {"recall": 1}
    assert got == recall(sample_memory, EMBEDDER, ask(query, levels))
    assert got.context and got.items


def test_a_remote_recall_follows_a_moved_partition(sample_memory: VectorStore, worker: _Worker) -> None:
    """The worker first named answers 409 (the partition has moved): the owner is located again and
    the recall sent there, as for a store call."""
    former = _Worker(sample_memory, owner=False)
    asked: list[bool] = []

    def locate(partition: int, refresh: bool) -> str:
        asked.append(refresh)
        return worker.url if refresh else former.url

    try:
        with httpx.Client(timeout=10) as client:
            got = recall_at(RemoteStore(0, locate, client, timeout_s=5.0), EMBEDDER, ask("moving"))
    finally:
        former.shutdown()
        former.server_close()
    assert asked == [False, True]
    assert dict(former.requests) == {"recall": 1} and dict(worker.requests) == {"recall": 1}
    assert got == recall(sample_memory, EMBEDDER, ask("moving"))


def test_a_malformed_remote_recall_is_a_value_error_at_the_caller(worker: _Worker) -> None:
    with httpx.Client(timeout=10) as client:
        remote = RemoteStore(0, lambda partition, refresh: worker.url, client)
        with pytest.raises(ValueError, match="malformed recall request"):
            remote.post("/recall/0", orjson.dumps({**GOOD, "budget_tokens": "many"}))
    assert worker.requests["recall"] == 1  # refused once, not retried


def test_zone_and_now_reach_the_worker(sample_memory: VectorStore, worker: _Worker) -> None:
    """The gateway's zone renders the context (day headers), not the worker's."""
    with httpx.Client(timeout=10) as client:
        remote = RemoteStore(0, lambda partition, refresh: worker.url, client)
        tokyo = recall_at(remote, EMBEDDER, ask("What did I do last week?", zone="Asia/Tokyo"))
    assert tokyo == recall(
        sample_memory,
        EMBEDDER,
        Ask(user_key=USER, query="What did I do last week?", now=NOW, budget_tokens=400, zone="Asia/Tokyo"),
    )


def test_the_worker_page_sheds_past_its_limit_and_refuses_what_it_cannot_serve(
    sample_memory: VectorStore,
) -> None:
    """``POST /recall/{partition}`` on a worker (memstream.embedded_store.internal.Recalls): a recall
    past the worker's limit is shed with 503 at once, not queued behind the others; the lease is returned
    whatever the outcome, so a rebalance never waits for a recall that ended."""
    leases = ReadLeases(limit=1)
    recalls = Recalls(lambda: {0}, leases, lambda _: sample_memory, EMBEDDER)
    body = orjson.dumps(ask_to_wire(ask("Where am I moving to?")))
    ran = metrics.WORKER_RECALL_SECONDS.labels("run")._sum.get()
    status, out = asyncio.run(recalls.answer("0", body))
    assert status == 200 and recalled_from_wire(orjson.loads(out)).items
    assert leases.reading(0) == 0
    assert metrics.WORKER_RECALL_SECONDS.labels("run")._sum.get() > ran  # timed for /metrics

    assert leases.try_enter(0)  # a recall is running: the limit is reached
    shed = metrics.WORKER_RECALLS_SHED._value.get()
    status, out = asyncio.run(recalls.answer("0", body))
    assert (status, out) == (503, b"1 recalls already running on this worker")
    assert metrics.WORKER_RECALLS_SHED._value.get() == shed + 1
    leases.exit(0)

    assert [asyncio.run(recalls.answer(p, body))[0] for p in ("1", "x")] == [409, 409]  # not held here
    status, out = asyncio.run(recalls.answer("0", b"not json"))
    assert status == 400 and out.startswith(b"body is not JSON") and leases.reading(0) == 0

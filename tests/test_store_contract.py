"""One contract for every VectorStore adapter: Qdrant Edge on disk, and the server adapter on
qdrant-client's local mode (the same client code paths, Qdrant's filter semantics, no server)."""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt
import orjson
import pydantic
import pytest
from httpx import Headers
from qdrant_client import QdrantClient
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

import memstream
from memstream.adapters.store import (
    CollectionSpec,
    Filter,
    Point,
    Range,
    SearchQuery,
    StoreUnavailable,
    VectorStore,
    search,
)
from memstream.adapters.store.edge import EdgeStore
from memstream.adapters.store.qdrant_server import QdrantServerStore
from memstream.core import lexical
from memstream.embedded_store.remote_store import RemoteStore, serve

# qdrant-client's local mode warns that payload indexes do nothing there; the contract still creates them.
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")

DIM = 8
SPEC = CollectionSpec(
    name="units",
    dim=DIM,
    keyword_fields=("user", "session"),
    numeric_fields=("ts",),
    tenant_field="tenant",
    sparse_vector="text",
)
DENSE_ONLY = CollectionSpec(name="old", dim=DIM, keyword_fields=("user",))  # as made before sparse vectors
Vec = npt.NDArray[np.float32]


def pid(n: int) -> str:
    return str(uuid.UUID(int=n + 1))


def unit(n: int) -> Vec:
    v = np.zeros(DIM, dtype=np.float32)
    v[n % DIM] = 1.0
    return v


def rand_vecs(n: int, seed: int = 0) -> npt.NDArray[np.float32]:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def cosine(a: Vec, b: Vec) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def make_edge(tmp_path: Path) -> VectorStore:
    return EdgeStore(tmp_path / "store")


def make_local(tmp_path: Path) -> VectorStore:
    return QdrantServerStore(QdrantClient(location=":memory:"))


class _StoreServer(http.server.HTTPServer):
    """The worker side of ``memstream.embedded_store.remote_store`` (``serve``) over real HTTP, one
    request at a time."""

    def __init__(self, store: VectorStore) -> None:
        self.store = store
        super().__init__(("127.0.0.1", 0), _StoreHandler)


class _StoreHandler(http.server.BaseHTTPRequestHandler):
    server: _StoreServer

    def do_POST(self) -> None:
        op = self.path.rsplit("/", 1)[-1]
        body = self.rfile.read(int(self.headers["content-length"] or 0))
        try:
            status, out = 200, serve(self.server.store, op, body)
        except ValueError as exc:
            status, out = 400, orjson.dumps({"error": str(exc)})
        self.send_response(status)
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: object) -> None:
        return None


def make_remote(tmp_path: Path) -> VectorStore:
    """An Edge store held by another "process" (a server thread), used through RemoteStore."""
    server = _StoreServer(EdgeStore(tmp_path / "store"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return RemoteStore(0, lambda partition, refresh: url, httpx.Client(timeout=10), timeout_s=1.0)


@pytest.fixture(params=[make_edge, make_local, make_remote], ids=["edge", "qdrant-local", "remote-edge"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    factory: Callable[[Path], VectorStore] = request.param
    s = factory(tmp_path)
    s.ensure_collection(SPEC)
    yield s
    s.close()


def test_remote_store_without_an_owner_is_unavailable() -> None:
    remote = RemoteStore(3, lambda partition, refresh: None, httpx.Client(), timeout_s=0.3)
    with pytest.raises(StoreUnavailable, match="no worker owns partition 3"):
        remote.count("units")


def test_remote_store_follows_a_moved_partition(tmp_path: Path) -> None:
    """A worker that answers 409 (not the owner any more) sends the call to the new owner."""
    owner = _StoreServer(EdgeStore(tmp_path / "store"))
    threading.Thread(target=owner.serve_forever, daemon=True).start()
    stale = http.server.HTTPServer(("127.0.0.1", 0), _FormerOwnerHandler)
    threading.Thread(target=stale.serve_forever, daemon=True).start()
    asked: list[bool] = []

    def locate(partition: int, refresh: bool) -> str:
        asked.append(refresh)
        server = owner if refresh else stale
        return f"http://127.0.0.1:{server.server_address[1]}"

    remote = RemoteStore(0, locate, httpx.Client(timeout=5), timeout_s=5.0)
    remote.ensure_collection(SPEC)
    assert remote.count(SPEC.name) == 0
    assert asked[:2] == [False, True]


class _FormerOwnerHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"] or 0))
        self.send_response(409)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


def seed_users(store: VectorStore, users: int = 3, per_user: int = 10) -> dict[str, Vec]:
    """Every user gets the same vectors, so only the filter can keep users apart."""
    vecs = rand_vecs(per_user)
    points, by_id = [], {}
    for u in range(users):
        for i in range(per_user):
            point_id = pid(u * per_user + i)
            payload = {"user": f"user-{u}", "tenant": f"t-{u % 2}", "ts": 1000 + i, "session": f"s-{i % 2}"}
            points.append(Point(point_id, vecs[i], payload))
            by_id[point_id] = vecs[i]
    store.upsert(SPEC.name, points)
    return by_id


def test_satisfies_protocol(store: VectorStore) -> None:
    assert isinstance(store, VectorStore)


def test_ensure_collection_is_idempotent(store: VectorStore) -> None:
    store.upsert(SPEC.name, [Point(pid(0), unit(0), {"user": "a"})])
    store.ensure_collection(SPEC)
    store.ensure_collection(SPEC)
    assert store.count(SPEC.name) == 1


def test_ensure_collection_rejects_another_dim(store: VectorStore) -> None:
    with pytest.raises(ValueError, match="dim"):
        store.ensure_collection(CollectionSpec(name=SPEC.name, dim=DIM * 2))


def test_upsert_then_retrieve_round_trips_payload(store: VectorStore) -> None:
    payload = {
        "user": "a",
        "ts": 1700000000,
        "score": 0.25,
        "text": "héllo ✓",
        "tags": ["x", "y"],
        "nested": {"spans": [[0, 3], [5, 9]], "meta": {"ok": True, "none": None}},
    }
    store.upsert(SPEC.name, [Point(pid(0), unit(0), payload)])
    hits = store.retrieve(SPEC.name, [pid(0)])
    assert [(h.id, h.payload) for h in hits] == [(pid(0), payload)]


def test_retrieve_unknown_ids_returns_nothing(store: VectorStore) -> None:
    store.upsert(SPEC.name, [Point(pid(0), unit(0), {"user": "a"})])
    assert store.retrieve(SPEC.name, [pid(99), pid(98)]) == []
    assert [h.id for h in store.retrieve(SPEC.name, [pid(99), pid(0)])] == [pid(0)]
    assert store.retrieve(SPEC.name, []) == []


def test_retrieve_with_vectors_returns_the_stored_dense_vectors(store: VectorStore) -> None:
    """Beside a sparse vector or not, and in a dense-only collection; cosine stores them at unit length."""
    vecs = rand_vecs(3, seed=7)
    store.upsert(
        SPEC.name,
        [
            Point(pid(0), vecs[0], {"user": "a"}, lexical.encode_document("my cousin flew to zanzibar")),
            Point(pid(1), vecs[1], {"user": "a"}),
        ],
    )
    store.ensure_collection(DENSE_ONLY)
    store.upsert(DENSE_ONLY.name, [Point(pid(2), vecs[2], {"user": "a"})])
    found = store.retrieve(SPEC.name, [pid(0), pid(1), pid(99)], with_vectors=True)
    found += store.retrieve(DENSE_ONLY.name, [pid(2)], with_vectors=True)
    assert sorted(h.id for h in found) == [pid(0), pid(1), pid(2)]
    for h in found:
        expected = vecs[int(uuid.UUID(h.id)) - 1]
        assert h.vector is not None and h.vector.dtype == np.float32
        np.testing.assert_allclose(h.vector, expected / np.linalg.norm(expected), rtol=1e-5, atol=1e-6)
        assert h.payload == {"user": "a"}
    assert all(h.vector is None for h in store.retrieve(SPEC.name, [pid(0), pid(1)]))
    assert all(h.vector is None for h in search(store, SPEC.name, vecs[0], 2, Filter()))
    assert store.retrieve(SPEC.name, [], with_vectors=True) == []


def test_upsert_same_id_twice_is_one_point(store: VectorStore) -> None:
    store.upsert(SPEC.name, [Point(pid(0), unit(0), {"user": "a", "v": 1})])
    store.upsert(SPEC.name, [Point(pid(0), unit(1), {"user": "a", "v": 2})])
    assert store.count(SPEC.name) == 1
    assert store.retrieve(SPEC.name, [pid(0)])[0].payload == {"user": "a", "v": 2}
    assert search(store, SPEC.name, unit(1), 1, Filter())[0].score == pytest.approx(1.0, abs=1e-5)


def test_search_equality_filter_isolates_users(store: VectorStore) -> None:
    seed_users(store)
    for u in range(3):
        for q in rand_vecs(5, seed=7):
            hits = search(store, SPEC.name, q, 30, Filter(equals={"user": f"user-{u}"}))
            assert len(hits) == 10
            assert {h.payload["user"] for h in hits} == {f"user-{u}"}
    hits = search(store, SPEC.name, unit(0), 30, Filter(equals={"tenant": "t-1", "session": "s-0"}))
    assert len(hits) == 5
    assert all(h.payload["user"] == "user-1" and h.payload["session"] == "s-0" for h in hits)
    assert search(store, SPEC.name, unit(0), 10, Filter(equals={"user": "nobody"})) == []


def test_search_numeric_range_is_gte_inclusive_lt_exclusive(store: VectorStore) -> None:
    seed_users(store, users=1)
    hits = search(store, SPEC.name, unit(0), 30, Filter(ranges={"ts": Range(gte=1003, lt=1006)}))
    assert sorted(h.payload["ts"] for h in hits) == [1003, 1004, 1005]
    hits = search(store, SPEC.name, unit(0), 30, Filter(ranges={"ts": Range(lt=1002)}))
    assert sorted(h.payload["ts"] for h in hits) == [1000, 1001]
    hits = search(store, SPEC.name, unit(0), 30, Filter(ranges={"ts": Range(gte=1008.5)}))
    assert sorted(h.payload["ts"] for h in hits) == [1009]


def test_search_exclude_ids(store: VectorStore) -> None:
    seed_users(store, users=1)
    excluded = [pid(0), pid(3), pid(7)]
    hits = search(store, SPEC.name, unit(0), 30, Filter(equals={"user": "user-0"}, exclude_ids=excluded))
    assert len(hits) == 7
    assert not {h.id for h in hits} & set(excluded)


def test_search_scores_are_cosine_best_first(store: VectorStore) -> None:
    by_id = seed_users(store, users=1)
    query = rand_vecs(1, seed=3)[0]
    hits = search(store, SPEC.name, query, 5, Filter(equals={"user": "user-0"}))
    expected = sorted(by_id, key=lambda i: cosine(query, by_id[i]), reverse=True)[:5]
    assert [h.id for h in hits] == expected
    for h in hits:
        assert h.score == pytest.approx(cosine(query, by_id[h.id]), abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # Identical direction scores ~1.0 whatever the length: cosine, not dot product.
    target = pid(4)
    top = search(store, SPEC.name, by_id[target] * 3.0, 1, Filter())[0]
    assert top.id == target
    assert top.score == pytest.approx(1.0, abs=1e-5)


def _user_queries(seed: int) -> list[SearchQuery]:
    """Six queries over ``seed_users``'s points, each for one user and a time bound."""
    return [
        SearchQuery(q, 4, Filter(equals={"user": f"user-{i % 3}"}, ranges={"ts": Range(lt=1000 + 3 + i)}))
        for i, q in enumerate(rand_vecs(6, seed=seed))
    ]


def test_search_many_equals_one_search_per_query(store: VectorStore) -> None:
    seed_users(store)
    queries = _user_queries(seed=11)
    batched = store.search_many(SPEC.name, queries)
    assert len(batched) == len(queries)
    for q, hits in zip(queries, batched, strict=True):
        one = search(store, SPEC.name, q.vector, q.limit, q.flt)
        assert [h.id for h in hits] == [h.id for h in one]
        assert [h.score for h in hits] == pytest.approx([h.score for h in one], abs=1e-6)
    assert store.search_many(SPEC.name, []) == []


def test_search_ids_are_search_many_without_the_rest(store: VectorStore) -> None:
    seed_users(store)
    queries = _user_queries(seed=12)
    pairs = store.search_ids(SPEC.name, queries)
    hits = store.search_many(SPEC.name, queries)
    assert [[i for i, _ in p] for p in pairs] == [[h.id for h in one] for one in hits]
    assert [[s for _, s in p] for p in pairs] == [[h.score for h in one] for one in hits]
    assert any(pairs) and all(isinstance(i, str) for p in pairs for i, _ in p)
    assert store.search_ids(SPEC.name, []) == []


def test_search_returns_only_the_payload_asked_for(store: VectorStore) -> None:
    seed_users(store, users=1)
    flt = Filter(equals={"user": "user-0"})
    assert all(h.payload == {} for h in search(store, SPEC.name, unit(0), 3, flt, with_payload=False))
    fields = search(store, SPEC.name, unit(0), 3, flt, with_payload=["ts"])
    assert fields and all(set(h.payload) == {"ts"} for h in fields)
    full = search(store, SPEC.name, unit(0), 3, flt)
    assert all({"user", "tenant", "ts", "session"} <= set(h.payload) for h in full)


def test_set_payload_merges(store: VectorStore) -> None:
    store.upsert(SPEC.name, [Point(pid(i), unit(i), {"user": "a", "v": 1, "keep": [1, 2]}) for i in range(3)])
    store.set_payload(SPEC.name, [pid(0), pid(1)], {"v": 2, "state": {"merged": True}})
    hits = {h.id: h.payload for h in store.retrieve(SPEC.name, [pid(0), pid(1), pid(2)])}
    assert hits[pid(0)] == {"user": "a", "v": 2, "keep": [1, 2], "state": {"merged": True}}
    assert hits[pid(1)] == hits[pid(0)]
    assert hits[pid(2)] == {"user": "a", "v": 1, "keep": [1, 2]}


def test_count_with_and_without_filter(store: VectorStore) -> None:
    assert store.count(SPEC.name) == 0
    seed_users(store)
    assert store.count(SPEC.name) == 30
    assert store.count(SPEC.name, Filter()) == 30
    assert store.count(SPEC.name, Filter(equals={"user": "user-1"})) == 10
    assert store.count(SPEC.name, Filter(equals={"tenant": "t-0"})) == 20
    assert store.count(SPEC.name, Filter(equals={"tenant": "t-0"}, ranges={"ts": Range(gte=1005)})) == 10
    assert store.count(SPEC.name, Filter(exclude_ids=[pid(0), pid(1)])) == 28


@pytest.mark.parametrize("flt", [None, Filter(equals={"tenant": "t-0"})], ids=["all", "filtered"])
def test_scroll_pages_through_everything_once(store: VectorStore, flt: Filter | None) -> None:
    seed_users(store)
    seen: list[str] = []
    offset: str | None = None
    pages = 0
    while True:
        hits, offset = store.scroll(SPEC.name, flt, 7, offset)
        assert len(hits) <= 7
        seen += [h.id for h in hits]
        pages += 1
        if offset is None:
            break
    expected = store.count(SPEC.name, flt)
    assert len(seen) == len(set(seen)) == expected
    assert pages == -(-expected // 7)
    if flt is not None:
        assert all(h.payload["tenant"] == "t-0" for h in store.retrieve(SPEC.name, seen))


def test_delete_by_filter(store: VectorStore) -> None:
    seed_users(store)
    store.delete(SPEC.name, Filter(equals={"user": "user-1"}, ranges={"ts": Range(lt=1004)}))
    assert store.count(SPEC.name, Filter(equals={"user": "user-1"})) == 6
    assert store.count(SPEC.name) == 26
    store.delete(SPEC.name, Filter(equals={"user": "user-2"}))
    # Without a filter the count may come from the store's own tallies: the same number as a scan.
    assert store.count(SPEC.name) == store.count(SPEC.name, Filter(ranges={"ts": Range(gte=0)})) == 16
    assert search(store, SPEC.name, unit(0), 10, Filter(equals={"user": "user-2"})) == []


def test_filter_rejects_booleans() -> None:
    # Qdrant Edge 0.9 cannot match a stored boolean, so no adapter may accept one.
    with pytest.raises(TypeError, match="bool"):
        Filter(equals={"valid": True})


# --- lexical candidates: sparse prefetch joined to the dense one ----------------------------------

TEXTS = [f"we talked about the garden and the weather, day {i}" for i in range(20)]


def seed_texts(store: VectorStore, collection: str = SPEC.name) -> tuple[Vec, dict[str, Vec]]:
    """20 points per user (a and b, same vectors and texts); the query vector's farthest point says a
    word no other point says. Returns the query vector and the vectors by id."""
    vecs = rand_vecs(20, seed=5)
    query = rand_vecs(1, seed=6)[0]
    far = min(range(20), key=lambda i: cosine(query, vecs[i]))
    texts = list(TEXTS)
    texts[far] = "my cousin flew to zanzibar for the festival"
    texts[(far + 1) % 20] = "trip trip"  # a common word, twice in a short text: strong tf, weak idf
    for i in range(20):
        if i not in (far, (far + 1) % 20) and i % 2:
            texts[i] += " and our trip"
    points, by_id = [], {}
    for u, user in enumerate(("a", "b")):
        for i in range(20):
            point_id = pid(u * 20 + i)
            payload = {"user": user, "ts": 1000 + i, "text": texts[i], "far": int(i == far)}
            points.append(Point(point_id, vecs[i], payload, lexical.encode_document(texts[i])))
            by_id[point_id] = vecs[i]
    store.upsert(collection, points)
    return query, by_id


def lexical_query(query: Vec, flt: Filter, text: str, limit: int = 5, sparse_limit: int = 3) -> SearchQuery:
    return SearchQuery(query, limit, flt, sparse=lexical.encode_query(text), sparse_limit=sparse_limit)


def test_lexical_match_outside_the_dense_top_k_is_found(store: VectorStore) -> None:
    query, by_id = seed_texts(store)
    mine = Filter(equals={"user": "a"})
    dense = search(store, SPEC.name, query, 5, mine)
    assert not any(h.payload["far"] for h in dense)
    hits = store.search_many(SPEC.name, [lexical_query(query, mine, "Who went to Zanzibar?")])[0]
    far = [h for h in hits if h.payload["far"]]
    assert len(far) == 1 and far[0].payload["user"] == "a"
    # The union of both branches, each hit with its cosine, best first.
    assert {h.id for h in hits} == {h.id for h in dense} | {far[0].id}
    for h in hits:
        assert h.score == pytest.approx(cosine(query, by_id[h.id]), abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_sparse_branch_ranks_by_idf_weighted_bm25(store: VectorStore) -> None:
    """ "trip trip" has the higher term weight, "zanzibar" the rarer word: with the store's IDF the rare
    word's point is the one sparse candidate."""
    query, _ = seed_texts(store)
    mine = Filter(equals={"user": "a"})
    dense_ids = {h.id for h in search(store, SPEC.name, query, 1, mine)}
    hits = store.search_many(SPEC.name, [lexical_query(query, mine, "zanzibar trip", 1, 1)])[0]
    lexical_hits = [h for h in hits if h.id not in dense_ids]
    assert [h.payload["text"] for h in lexical_hits] == ["my cousin flew to zanzibar for the festival"]


def test_filters_apply_to_both_branches(store: VectorStore) -> None:
    query, _ = seed_texts(store)
    mine = Filter(equals={"user": "b"}, ranges={"ts": Range(gte=1000)})
    hits = store.search_many(SPEC.name, [lexical_query(query, mine, "zanzibar", 20, 5)])[0]
    assert len(hits) == 20 and {h.payload["user"] for h in hits} == {"b"}
    far_b = next(h.id for h in hits if h.payload["far"])
    without = Filter(equals={"user": "b"}, exclude_ids=[far_b])
    hits = store.search_many(SPEC.name, [lexical_query(query, without, "zanzibar", 3, 5)])[0]
    assert len(hits) == 3 and not any(h.payload["far"] for h in hits)  # no lexical match left to add


def test_sparse_query_without_terms_or_limit_is_dense_only(store: VectorStore) -> None:
    query, _ = seed_texts(store)
    mine = Filter(equals={"user": "a"})
    dense = [h.id for h in search(store, SPEC.name, query, 5, mine)]
    stop_words_only = lexical_query(query, mine, "what did they do?")
    no_limit = lexical_query(query, mine, "zanzibar", sparse_limit=0)
    for hits in store.search_many(SPEC.name, [stop_words_only, no_limit]):
        assert [h.id for h in hits] == dense


def test_collection_without_a_sparse_vector_answers_dense_only(store: VectorStore) -> None:
    """A collection made before sparse vectors, ensured again by a spec that has one: points keep
    their dense vectors, sparse queries get the dense answer."""
    store.ensure_collection(DENSE_ONLY)
    store.ensure_collection(replace(DENSE_ONLY, sparse_vector="text"))
    query, _ = seed_texts(store, "old")
    mine = Filter(equals={"user": "a"})
    dense = [h.id for h in search(store, "old", query, 5, mine)]
    hits = store.search_many("old", [lexical_query(query, mine, "zanzibar")])[0]
    assert [h.id for h in hits] == dense


def test_edge_reopens_a_dense_only_shard_under_a_sparse_spec(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = EdgeStore(tmp_path)
    old.ensure_collection(DENSE_ONLY)
    old.close()
    store = EdgeStore(tmp_path)
    store.ensure_collection(replace(DENSE_ONLY, sparse_vector="text"))
    assert "dense candidates only" in caplog.text  # the operator learns why and what to do
    query, _ = seed_texts(store, "old")
    mine = Filter(equals={"user": "a"})
    hits = store.search_many("old", [lexical_query(query, mine, "zanzibar")])[0]
    assert [h.id for h in hits] == [h.id for h in search(store, "old", query, 5, mine)]
    store.close()


# --- multivectors (MaxSim) ----------------------------------------------------------------------

MULTI = CollectionSpec(name="views", dim=DIM, keyword_fields=("user",), multivector="rows")


def test_a_multivector_query_scores_each_point_by_its_row_nearest_the_query(store: VectorStore) -> None:
    """Beside its dense vector a point holds rows (any number); a query naming the multivector scores
    each point by its best row's cosine, one naming none by the dense vector, with the same filters."""
    store.ensure_collection(MULTI)
    rows = rand_vecs(6, seed=11)
    store.upsert(
        MULTI.name,
        [
            Point(pid(0), unit(0), {"user": "a"}, multi=rows[0:3]),
            Point(pid(1), unit(1), {"user": "a"}, multi=rows[3:4]),
            Point(pid(2), unit(2), {"user": "b"}, multi=rows[4:6]),
        ],
    )
    query = rows[3] + 0.2 * rows[1]
    mine = Filter(equals={"user": "a"})
    by_rows, by_dense = store.search_many(
        MULTI.name,
        [SearchQuery(query, 5, mine, with_payload=False, using="rows"), SearchQuery(unit(1), 5, mine)],
    )
    expected = {pid(0): max(cosine(r, query) for r in rows[0:3]), pid(1): cosine(rows[3], query)}
    assert [h.id for h in by_rows] == sorted(expected, key=lambda i: -expected[i])
    assert {h.id: h.score for h in by_rows} == pytest.approx(expected, abs=1e-5)
    assert [(h.id, round(h.score, 5)) for h in by_dense] == [(pid(1), 1.0), (pid(0), 0.0)]


def test_retrieve_with_vectors_returns_a_points_rows(store: VectorStore) -> None:
    """In stored order, at unit length; none without ``with_vectors`` or in a collection without rows."""
    store.ensure_collection(MULTI)
    rows = rand_vecs(3, seed=12)
    store.upsert(MULTI.name, [Point(pid(0), unit(0), {"user": "a"}, multi=rows)])
    (hit,) = store.retrieve(MULTI.name, [pid(0)], with_vectors=True)
    assert hit.multi is not None and hit.multi.dtype == np.float32
    np.testing.assert_allclose(hit.multi, rows / np.linalg.norm(rows, axis=1, keepdims=True), atol=1e-6)
    assert hit.vector is not None and hit.vector == pytest.approx(unit(0), abs=1e-6)
    assert store.retrieve(MULTI.name, [pid(0)])[0].multi is None
    store.upsert(SPEC.name, [Point(pid(1), unit(1), {"user": "a"})])
    assert store.retrieve(SPEC.name, [pid(1)], with_vectors=True)[0].multi is None


def test_a_collection_made_without_its_multivector_is_a_clear_error(store: VectorStore) -> None:
    """A collection made by an older layout (no rows) cannot take them in place: the error says what to do."""
    store.ensure_collection(DENSE_ONLY)
    with pytest.raises(ValueError, match=r"made without its 'rows' multivector.*delete"):
        store.ensure_collection(replace(DENSE_ONLY, multivector="rows"))


def test_edge_reopens_a_shard_made_without_its_multivector_as_a_clear_error(tmp_path: Path) -> None:
    old = EdgeStore(tmp_path)
    old.ensure_collection(DENSE_ONLY)
    old.close()
    store = EdgeStore(tmp_path)
    where = re.escape(str(tmp_path / "old"))
    with pytest.raises(ValueError, match=f"{where} was made without its 'rows' multivector.*delete"):
        store.ensure_collection(replace(DENSE_ONLY, multivector="rows"))
    store.ensure_collection(DENSE_ONLY)  # left as it was
    store.close()


# --- Qdrant Edge only: durability -------------------------------------------------------------


def test_edge_reopens_from_disk(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path)
    store.ensure_collection(SPEC)
    seed_users(store)
    store.close()

    reopened = EdgeStore(tmp_path)
    reopened.ensure_collection(SPEC)
    assert reopened.count(SPEC.name) == 30
    assert reopened.retrieve(SPEC.name, [pid(0)])[0].payload["user"] == "user-0"
    assert len(search(reopened, SPEC.name, unit(0), 5, Filter(equals={"user": "user-2"}))) == 5
    with pytest.raises(Exception, match="WouldBlock"):  # one opener per shard, even in one process
        EdgeStore(tmp_path).ensure_collection(SPEC)
    reopened.close()
    with pytest.raises(ValueError, match="does not match"):
        EdgeStore(tmp_path).ensure_collection(CollectionSpec(name=SPEC.name, dim=DIM * 2))


def test_edge_wal_keeps_data_without_close(tmp_path: Path) -> None:
    # A child process writes and dies without flush() or close(); only the WAL holds the points.
    child = textwrap.dedent(
        f"""
        import os, sys, numpy as np
        from pathlib import Path
        from memstream.adapters.store import CollectionSpec, Point
        from memstream.adapters.store.edge import EdgeStore
        s = EdgeStore(Path(sys.argv[1]))
        s.ensure_collection(CollectionSpec(name="units", dim={DIM}, keyword_fields=("user",)))
        v = np.ones({DIM}, dtype=np.float32)
        s.upsert("units", [Point("{pid(0)}", v, {{"user": "a"}}), Point("{pid(1)}", v, {{"user": "b"}})])
        s.set_payload("units", ["{pid(1)}"], {{"late": 1}})
        os._exit(0)
        """
    )
    # The child must import this checkout's memstream even when it is not installed.
    repo = str(Path(memstream.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-c", child, str(tmp_path)], check=True, timeout=60, env=env)

    store = EdgeStore(tmp_path)
    store.ensure_collection(CollectionSpec(name="units", dim=DIM, keyword_fields=("user",)))
    assert store.count("units") == 2
    assert store.retrieve("units", [pid(1)])[0].payload == {"user": "b", "late": 1}
    store.close()


def test_edge_unknown_collection_is_a_clear_error(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path)
    with pytest.raises(LookupError, match="ensure_collection"):
        store.count("missing")


# --- server adapter only: outages become StoreUnavailable ------------------------------------


class _RaisingClient:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def count(self, *args: object, **kwargs: object) -> None:
        raise self.exc


def _response(status: int) -> UnexpectedResponse:
    return UnexpectedResponse(status, "", b"{}", Headers())


@pytest.mark.parametrize(
    ("exc", "unavailable"),
    [
        (_response(503), True),
        (_response(429), True),
        (_response(400), False),
        (_response(404), False),
        (ResponseHandlingException(TimeoutError("read timed out")), True),
        (ResponseHandlingException(pydantic.ValidationError.from_exception_data("x", [])), False),
    ],
    ids=["503", "429", "400", "404", "transport", "parse-error"],
)
def test_server_adapter_maps_outages(exc: Exception, unavailable: bool) -> None:
    store = QdrantServerStore(_RaisingClient(exc))  # type: ignore[arg-type]
    expected = StoreUnavailable if unavailable else type(exc)
    with pytest.raises(expected):
        store.count(SPEC.name)


def test_server_adapter_unreachable_is_store_unavailable() -> None:
    store = QdrantServerStore(QdrantClient(url="http://127.0.0.1:1", timeout=1, check_compatibility=False))
    with pytest.raises(StoreUnavailable):
        store.ensure_collection(SPEC)
    store.close()

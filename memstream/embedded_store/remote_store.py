"""The store of a partition owned by another process, over HTTP.

Qdrant Edge lets one process open a shard, and with the embedded store each partition's shard
is held by the worker that owns the partition. A gateway reads and forgets through that worker:
:class:`RemoteStore` speaks the :class:`VectorStore` protocol over HTTP, and :func:`serve` is the
worker's side of it (mounted at ``/store/<partition>/<op>`` on the worker's internal port, which
asks for the gateways' token, ``internal.py`` here); a recall goes to the worker whole, in one
request (:meth:`RemoteStore.post`, ``remote_recall.py`` here). With a Qdrant server every process opens the
store itself and none of this is used.

On that port :func:`serve` runs ``confined``: only what a gateway sends (reads and deletes), each
pinned to one user (:func:`confinement`), so no request, even one carrying the token, reads or
empties a whole partition.

The wire format is JSON (orjson, numpy vectors as arrays); each call names its operation. A sparse
vector is ``{"indices": [...], "values": [...]}``; a point or query without one omits it, so an older
peer's requests still read the same. A retrieve asks for the points' dense vectors with
``"with_vectors": true`` and gets each as ``"vector"`` (floats); an older worker leaves them out, which
a caller takes as "not stored". A point's or hit's multivector is ``"multi"`` (rows of floats), a query's
multivector to search ``"using"``; each is left out when there is none.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import orjson

from memstream.core.store import (
    CollectionSpec,
    Filter,
    Hit,
    Point,
    Range,
    SearchQuery,
    SparseVector,
    StoreUnavailable,
    VectorStore,
    scroll_all,
)
from memstream.core.units import TENANT_FIELD, USER_FIELD


def _filter_out(flt: Filter | None) -> dict[str, Any] | None:
    if flt is None:
        return None
    return {
        "equals": dict(flt.equals),
        "ranges": {k: {"gte": r.gte, "lt": r.lt} for k, r in flt.ranges.items()},
        "exclude_ids": list(flt.exclude_ids),
    }


def _filter_in(raw: Mapping[str, Any] | None) -> Filter | None:
    if raw is None:
        return None
    return Filter(
        equals=raw.get("equals", {}),
        ranges={k: Range(v.get("gte"), v.get("lt")) for k, v in raw.get("ranges", {}).items()},
        exclude_ids=raw.get("exclude_ids", ()),
    )


def _hits_out(hits: Sequence[Hit]) -> list[dict[str, Any]]:
    return [_hit_out(h) for h in hits]


def _hit_out(h: Hit) -> dict[str, Any]:
    out: dict[str, Any] = {"id": h.id, "score": h.score, "payload": h.payload}
    if h.vector is not None:
        out["vector"] = h.vector
    if h.multi is not None:
        out["multi"] = h.multi
    return out


def _hits_in(raw: Sequence[Mapping[str, Any]]) -> list[Hit]:
    return [
        Hit(h["id"], h["score"], h["payload"], _vector_in(h.get("vector")), _vector_in(h.get("multi")))
        for h in raw
    ]


def _vector_in(raw: Sequence[Any] | None) -> npt.NDArray[np.float32] | None:
    return None if raw is None else np.asarray(raw, dtype=np.float32)


def _sparse_out(vector: SparseVector | None) -> dict[str, Any] | None:
    return None if vector is None else {"indices": vector.indices, "values": vector.values}


def _sparse_in(raw: Mapping[str, Any] | None) -> SparseVector | None:
    return None if raw is None else SparseVector(tuple(raw["indices"]), tuple(raw["values"]))


def _with_payload(v: Any) -> bool | list[str]:
    return v if isinstance(v, bool) else list(v)


def serve(store: VectorStore, op: str, body: bytes, confined: bool = False) -> bytes:
    """Run one operation from the wire on ``store`` and encode its answer. ValueError on an
    operation that does not exist or a malformed body, and when ``confined`` on one
    :func:`confinement` refuses."""
    try:
        req = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"body is not JSON: {exc}") from exc
    handler = _OPS.get(op)
    if handler is None:
        raise ValueError(f"unknown store operation {op!r}")
    if confined and (refused := confinement(op, req)):
        raise ValueError(refused)
    try:
        result = handler(store, req)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed {op} request: {exc!r}") from exc
    return orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY)


def _ensure(store: VectorStore, req: dict[str, Any]) -> None:
    store.ensure_collection(CollectionSpec(**req["spec"]))


def _upsert(store: VectorStore, req: dict[str, Any]) -> None:
    points = [
        Point(
            p["id"],
            np.asarray(p["vector"], dtype=np.float32),
            p["payload"],
            _sparse_in(p.get("sparse")),
            _vector_in(p.get("multi")),
        )
        for p in req["points"]
    ]
    store.upsert(req["collection"], points)


def _search_many(store: VectorStore, req: dict[str, Any]) -> list[list[dict[str, Any]]]:
    queries = [
        SearchQuery(
            np.asarray(q["vector"], dtype=np.float32),
            q["limit"],
            _filter_in(q["flt"]) or Filter(),
            _with_payload(q["with_payload"]),
            _sparse_in(q.get("sparse")),
            q.get("sparse_limit", 0),
            q.get("using"),
        )
        for q in req["queries"]
    ]
    return [_hits_out(hits) for hits in store.search_many(req["collection"], queries)]


def _user_keys(store: VectorStore, req: dict[str, Any]) -> list[str]:
    tenant = Filter(equals={TENANT_FIELD: req["tenant"]})
    return sorted({str(hit.payload[USER_FIELD]) for hit in scroll_all(store, req["collection"], tenant)})


def _scroll(store: VectorStore, req: dict[str, Any]) -> dict[str, Any]:
    hits, offset = store.scroll(req["collection"], _filter_in(req["flt"]), req["limit"], req.get("offset"))
    return {"hits": _hits_out(hits), "offset": offset}


_OPS: dict[str, Callable[[VectorStore, dict[str, Any]], Any]] = {
    "ensure_collection": _ensure,
    "upsert": _upsert,
    "retrieve": lambda s, r: _hits_out(s.retrieve(r["collection"], r["ids"], r.get("with_vectors", False))),
    "search_many": _search_many,
    "set_payload": lambda s, r: s.set_payload(r["collection"], r["ids"], r["values"]),
    "count": lambda s, r: s.count(r["collection"], _filter_in(r["flt"])),
    "scroll": _scroll,
    "delete": lambda s, r: s.delete(r["collection"], _filter_in(r["flt"]) or Filter()),
    "user_keys": _user_keys,
}


# What a gateway sends a worker, and where its filter is: reads and deletes of one user's points.
# Writes (ensure_collection, upsert, set_payload) are the worker's own; retrieve names points by id.
_GATEWAY_FILTERS: dict[str, Callable[[Mapping[str, Any]], list[Any]]] = {
    "count": lambda r: [r.get("flt")],
    "scroll": lambda r: [r.get("flt")],
    "delete": lambda r: [r.get("flt")],
    "search_many": lambda r: [q.get("flt") if isinstance(q, Mapping) else None for q in r.get("queries", [])],
    "retrieve": lambda r: [],
}
# Operators list a tenant's users (``memstream users``): the keys alone, never a point's text.
_TENANT_OPS = frozenset({"user_keys"})


def confinement(op: str, req: Any) -> str | None:
    """Why a gateway's request ``op`` may not run, or None: an operation a gateway never sends, or a
    filter that does not pin one user (``equals`` on the user key), which would select the points of
    every user on the partition."""
    if op in _TENANT_OPS:
        tenant = req.get("tenant") if isinstance(req, Mapping) else None
        return None if isinstance(tenant, str) and tenant else f"{op} must name one tenant"
    filters_of = _GATEWAY_FILTERS.get(op)
    if filters_of is None:
        return f"{op} is not served to gateways"
    if not isinstance(req, Mapping):
        return f"malformed {op} request: not an object"
    for flt in filters_of(req):
        equals = flt.get("equals") if isinstance(flt, Mapping) else None
        user = equals.get(USER_FIELD) if isinstance(equals, Mapping) else None
        if not isinstance(user, str) or not user:
            return f"{op} must pin one user: a filter with equals.{USER_FIELD}"
    return None


class RemoteStore:
    """:class:`VectorStore` for ``partition``, served by whichever worker ``locate`` names.

    ``locate(partition, refresh)`` returns the owner's base URL (``refresh``: the last answer was
    wrong, ask the workers again). During a rebalance the partition has no owner for a moment,
    so a call retries until ``timeout_s`` and then raises :class:`StoreUnavailable`."""

    def __init__(
        self,
        partition: int,
        locate: Callable[[int, bool], str | None],
        client: httpx.Client,
        timeout_s: float = 10.0,
        token: str | None = None,
    ) -> None:
        self._partition = partition
        self._locate = locate
        self._client = client
        self._timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    @property
    def partition(self) -> int:
        return self._partition

    def _call(self, op: str, req: Mapping[str, Any]) -> Any:
        body = orjson.dumps(req, option=orjson.OPT_SERIALIZE_NUMPY)
        return orjson.loads(self.post(f"/store/{self._partition}/{op}", body))

    def post(self, path: str, body: bytes) -> bytes:
        """The body of the owner's 200 answer to ``body`` POSTed at ``path`` (a page the owner serves for
        a held partition: ``/store/<partition>/<op>``, or ``/recall/<partition>``). A 409 (not the
        owner any more) or an unreachable owner: located again and retried until ``timeout_s``, then
        :class:`StoreUnavailable`; a 400 (the request itself was wrong): ValueError; a 401 (this
        process's MEMSTREAM_INTERNAL_TOKEN is not the worker's): StoreUnavailable at once."""
        deadline = time.monotonic() + self._timeout_s
        refresh = False
        while True:
            base = self._locate(self._partition, refresh)
            problem = f"no worker owns partition {self._partition}"
            if base is not None:
                try:
                    r = self._client.post(f"{base}{path}", content=body, headers=self._headers)
                    if r.status_code == 200:
                        return r.content
                    if r.status_code == 400:  # the call itself was wrong, as it would be locally
                        raise ValueError(r.json().get("error", r.text))
                    if r.status_code == 401:
                        raise StoreUnavailable(
                            f"{base} refused MEMSTREAM_INTERNAL_TOKEN: not the workers' token"
                        )
                    if r.status_code != 409:  # 409: not the owner (any more)
                        raise StoreUnavailable(f"{path} at {base}: HTTP {r.status_code} {r.text[:200]}")
                    problem = f"{base} no longer owns partition {self._partition}"
                except httpx.TransportError as exc:
                    problem = f"{base}: {exc!r}"
            if time.monotonic() > deadline:
                raise StoreUnavailable(problem)
            refresh = True
            time.sleep(0.2)

    def ensure_collection(self, spec: CollectionSpec) -> None:
        self._call("ensure_collection", {"spec": spec.__dict__})

    def upsert(self, collection: str, points: Sequence[Point]) -> None:
        pts = [_point_out(p) for p in points]
        self._call("upsert", {"collection": collection, "points": pts})

    def retrieve(self, collection: str, ids: Sequence[str], with_vectors: bool = False) -> list[Hit]:
        req: dict[str, Any] = {"collection": collection, "ids": list(ids)}
        if with_vectors:
            req["with_vectors"] = True
        return _hits_in(self._call("retrieve", req))

    def search_many(self, collection: str, queries: Sequence[SearchQuery]) -> list[list[Hit]]:
        qs = [_query_out(q) for q in queries]
        return [_hits_in(h) for h in self._call("search_many", {"collection": collection, "queries": qs})]

    def search_ids(self, collection: str, queries: Sequence[SearchQuery]) -> list[list[tuple[str, float]]]:
        # Through search_many's operation: the HTTP round trip dwarfs building the hits, and the
        # internal port gets no new operation to confine.
        return [[(h.id, h.score) for h in hits] for hits in self.search_many(collection, queries)]

    def set_payload(self, collection: str, ids: Sequence[str], values: Mapping[str, Any]) -> None:
        self._call("set_payload", {"collection": collection, "ids": list(ids), "values": dict(values)})

    def count(self, collection: str, flt: Filter | None = None) -> int:
        return int(self._call("count", {"collection": collection, "flt": _filter_out(flt)}))

    def scroll(
        self, collection: str, flt: Filter | None, limit: int, offset: str | None = None
    ) -> tuple[list[Hit], str | None]:
        req = {"collection": collection, "flt": _filter_out(flt), "limit": limit, "offset": offset}
        out = self._call("scroll", req)
        return _hits_in(out["hits"]), out["offset"]

    def delete(self, collection: str, flt: Filter) -> None:
        self._call("delete", {"collection": collection, "flt": _filter_out(flt)})

    def user_keys(self, collection: str, tenant: str) -> list[str]:
        """The distinct user keys of ``tenant`` in ``collection``: a tenant's points leave the worker
        only as their keys."""
        return list(self._call("user_keys", {"collection": collection, "tenant": tenant}))

    def close(self) -> None:
        return None  # the client belongs to whoever made it


def _point_out(p: Point) -> dict[str, Any]:
    out: dict[str, Any] = {"id": p.id, "vector": p.vector, "payload": p.payload}
    if p.sparse is not None:
        out["sparse"] = _sparse_out(p.sparse)
    if p.multi is not None:
        out["multi"] = p.multi
    return out


def _query_out(q: SearchQuery) -> dict[str, Any]:
    out: dict[str, Any] = {
        "vector": q.vector,
        "limit": q.limit,
        "flt": _filter_out(q.flt),
        "with_payload": _with_payload(q.with_payload),
    }
    if q.sparse is not None:
        out |= {"sparse": _sparse_out(q.sparse), "sparse_limit": q.sparse_limit}
    if q.using is not None:
        out["using"] = q.using
    return out


class OwnerShards:
    """:class:`~memstream.adapters.store.shards.Shards` for a process that owns no partition (the gateway):
    each partition's store is the worker that owns it, found from the workers' ``/status`` (``worker_urls``).
    Its store pages are on the internal port that ``/status`` names, at the same host; they ask for
    ``token``."""

    def __init__(self, worker_urls: Sequence[str], token: str | None, timeout_s: float = 10.0) -> None:
        self._urls = [u.rstrip("/") for u in worker_urls]
        self._client = httpx.Client(timeout=timeout_s)
        self._timeout_s = timeout_s
        self._token = token
        self._owner: dict[int, str] = {}
        self._looked = 0.0

    def locate(self, partition: int, refresh: bool) -> str | None:
        if (refresh or partition not in self._owner) and time.monotonic() - self._looked > 0.1:
            self._looked = time.monotonic()
            owner: dict[int, str] = {}
            for url in self._urls:
                try:
                    status = self._client.get(f"{url}/status").json()
                except (httpx.HTTPError, ValueError):
                    continue  # down or starting: its partitions will have moved or come back
                port = status.get("internal_port")
                if port:  # none: its data port is not up yet
                    data = str(httpx.URL(url).copy_with(port=int(port), path="/")).rstrip("/")
                    owner.update((int(p), data) for p in status.get("partitions", []))
            self._owner = owner
        return self._owner.get(partition)

    def get(self, partition: int) -> VectorStore:
        return RemoteStore(partition, self.locate, self._client, self._timeout_s, self._token)

    def release(self, partitions: Any) -> None:
        return None

    def opened(self) -> list[VectorStore]:
        return []

    def close(self) -> None:
        self._client.close()

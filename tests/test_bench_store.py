"""bench/store.py: the points of each collection layout, built by memstream's own code, and a small
run of the bench end to end (upserts, user-filtered searches, the heap per point)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.store import points_of, run
from memstream.core.unit_views import UNIT_VIEWS
from memstream.core.units import UNITS, USER_FIELD, unit_from_payload


@pytest.mark.parametrize("collection", ["plain", "units", "unit_views"])
def test_points_of_each_layout_spread_over_the_users(collection: str) -> None:
    vectors = np.eye(12, 8, dtype=np.float32)
    spec, points = points_of(collection, vectors, users=4)

    assert len(points) == 12 and len({p.id for p in points}) == 12
    users = [p.payload[USER_FIELD] for p in points]
    assert len(set(users)) == 4 and users == [users[i % 4] for i in range(12)]  # round-robin
    assert all(np.array_equal(p.vector, vectors[i]) for i, p in enumerate(points))
    if collection == "units":
        assert spec.name == UNITS and spec.sparse_vector is not None
        assert all(p.sparse is not None and len(p.sparse.indices) > 0 for p in points)
        assert all(unit_from_payload(p.payload).unit_id == p.id for p in points)  # real unit payloads
    elif collection == "unit_views":
        assert spec.name == UNIT_VIEWS and spec.multivector is not None
        assert all(
            p.multi is not None and np.array_equal(p.multi, vectors[i : i + 1]) for i, p in enumerate(points)
        )
    else:
        assert spec.sparse_vector is None and all(p.sparse is None for p in points)


@pytest.mark.parametrize("collection", ["plain", "units"])
def test_a_small_run_reports_rates_latencies_and_bytes(collection: str, tmp_path: Path) -> None:
    result = run(points=600, users=6, dim=16, batch=64, queries=40, root=tmp_path, collection=collection)

    assert result["collection"] == collection and result["points"] == 600
    assert result["upsert_points_per_s"] > 0
    assert 0 < result["search_p50_ms"] <= result["search_p95_ms"]
    assert isinstance(result["anon_bytes_per_point"], int) and isinstance(result["file_bytes_per_point"], int)

"""Calibration functions on small synthetic vectors whose answers are known by construction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.apps import calibrate as cal
from memstream.apps.calibrate import (
    CalibrationReport,
    GridRow,
    calibrate,
    fires,
    neighbour_similarities,
    render,
    report_from_vectors,
    suggest_theta,
)

NAN = math.nan


def basis(*axes: int, dim: int = 8) -> np.ndarray:
    return np.eye(dim, dtype=np.float32)[list(axes)]


def test_neighbours_are_earlier_units_only_in_descending_order() -> None:
    diag = np.full(8, 0, np.float32)
    diag[:2] = 1 / math.sqrt(2)
    vecs = np.vstack([basis(0, 0, 1), diag[None, :]])  # e0, e0, e1, (e0+e1)/√2
    sims = neighbour_similarities(vecs, top_k=3)
    expected = [
        [NAN, NAN, NAN],  # nothing before the first unit
        [1.0, NAN, NAN],
        [0.0, 0.0, NAN],
        [0.7071, 0.7071, 0.7071],
    ]
    np.testing.assert_allclose(sims, expected, atol=1e-4)


def test_blocked_computation_matches_brute_force(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cal, "_ROW_BLOCK", 7)  # several blocks, the last one partial
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(50, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    sims = neighbour_similarities(vecs, top_k=5)
    for i in range(50):
        earlier = np.sort(vecs[:i] @ vecs[i])[::-1][:5]
        np.testing.assert_allclose(sims[i, : len(earlier)], earlier, atol=1e-6)
        assert np.isnan(sims[i, len(earlier) :]).all()


def test_fires_needs_theta_count_neighbours_at_or_above_theta() -> None:
    sims = np.array([[0.9, 0.8, 0.7], [0.9, 0.5, NAN], [NAN, NAN, NAN]], np.float32)
    assert fires(sims, 0.75, 2).tolist() == [True, False, False]
    assert fires(sims, 0.5, 2).tolist() == [True, True, False]
    assert fires(sims, 0.7, 3).tolist() == [True, False, False]


def test_suggest_theta_is_closest_to_target_and_higher_on_ties() -> None:
    grid = [GridRow(theta_sim=t, fires_per_1000=f) for t, f in [(0.3, 400), (0.4, 130), (0.5, 70), (0.6, 5)]]
    assert suggest_theta(grid) == 0.5  # |70-100| < |130-100|
    tie = [GridRow(theta_sim=0.4, fires_per_1000=150), GridRow(theta_sim=0.5, fires_per_1000=50)]
    assert suggest_theta(tie) == 0.5
    assert suggest_theta(grid, target_fires_per_1000=400) == 0.3


def test_report_counts_fires_per_1000_units() -> None:
    same = basis(*[0] * 10)  # 10 identical units: cosine exactly 1 to every earlier one
    apart = basis(0, 1, 2, 3, 4)  # 5 orthogonal units: cosine 0
    report = report_from_vectors({"u1": same, "u2": apart}, embedder="test", top_k=3, theta_count=2)
    assert (report.users, report.units, report.dim) == (2, 15, 8)
    by_theta = {row.theta_sim: row.fires_per_1000 for row in report.grid}
    # θ 0: units with ≥ 2 predecessors fire in both users (8 + 3); above 0 only the identical ones.
    assert by_theta[0.0] == pytest.approx(1000 * 11 / 15, abs=0.1)
    assert by_theta[0.5] == by_theta[1.0] == pytest.approx(1000 * 8 / 15, abs=0.1)
    # 2nd-best neighbour: 1.0 for 8 units, 0.0 for 3 units.
    assert report.deciding_percentiles["p50"] == 1.0
    # non-NaN top-3 cells: units with 0, 1, 2, then 3 predecessors
    assert sum(b.count for b in report.histogram) == (0 + 1 + 2 + 7 * 3) + (0 + 1 + 2 + 3 + 3)
    assert report.suggested_theta_sim == 1.0  # 533/1000 everywhere above 0: the tie goes to the top


def test_report_is_json_round_trippable_and_renders() -> None:
    report = report_from_vectors({"u": basis(0, 0, 1, 1, 0, 1)}, embedder="test", top_k=2, theta_count=1)
    assert CalibrationReport.model_validate_json(report.model_dump_json()) == report
    text = render(report)
    assert "<- suggested" in text and "fires/1000" in text and "#" in text


def test_empty_input_gives_an_empty_report() -> None:
    report = report_from_vectors({}, embedder="test", top_k=10, theta_count=5)
    assert report.units == 0 and report.neighbour_percentiles == {} and report.histogram == []
    render(report)


def test_calibrate_embeds_each_users_texts() -> None:
    texts = {"t/a": ["we talked about hiking trails"] * 4, "t/b": ["pottery class", "violin lessons"]}
    report = calibrate(texts, HashingEmbedder(64), top_k=3, theta_count=2)
    assert (report.embedder, report.dim, report.units) == ("hash", 64, 6)
    by_theta = {row.theta_sim: row.fires_per_1000 for row in report.grid}
    assert by_theta[0.95] == pytest.approx(1000 * 2 / 6, abs=0.1)  # units 3 and 4 of user a

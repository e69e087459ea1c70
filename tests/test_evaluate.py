"""`memstream eval locomo` on the dev split (skipped when absent): the report is consistent with the
per-question items it lists, so the score can be recomputed independently."""

from __future__ import annotations

import asyncio
import statistics
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memstream.evaluate import evaluate, fill, questions
from memstream.recall.rank import Item
from memstream.settings import Settings
from tests.conftest import LOCOMO

pytestmark = pytest.mark.skipif(not LOCOMO.exists(), reason="LoCoMo dev split not present")


def test_questions_parse_evidence_leniently() -> None:
    asked, now = questions(LOCOMO)
    assert asked and all(q.evidence for q in asked)
    assert all(e.startswith("D") and ":" in e for q in asked for e in q.evidence)
    assert set(now) == {q.user_key for q in asked}


def test_report_is_recomputable_from_its_items(tmp_path: Path) -> None:
    report = asyncio.run(
        evaluate(Settings(data_dir=tmp_path, embedder="hash"), LOCOMO, [300, 2000], progress=False)
    )
    rows = report["per_question"]
    assert report["questions"] == len(rows) > 100
    for budget in ("300", "2000"):
        recomputed = []
        leaves = []
        for row in rows:
            items = row["budgets"][budget]["items"]
            assert sum(i["tokens"] for i in items) <= int(budget)
            returned = {t for i in items for t in i["source_turn_ids"]}
            recomputed.append(sum(e in returned for e in row["evidence"]) / len(row["evidence"]))
            leaf = {
                t for i in items if i["kind"] in ("unit", "episode", "fact") for t in i["source_turn_ids"]
            }
            leaves.append(sum(e in leaf for e in row["evidence"]) / len(row["evidence"]))
        assert report["evidence_recall"][budget]["all"] == round(statistics.mean(recomputed), 4)
        assert report["leaves_only_evidence_recall"][budget]["all"] == round(statistics.mean(leaves), 4)
        categories = set(report["evidence_recall"][budget])
        assert {"all", "multi-hop"} <= categories
        assert set(report["leaves_only_evidence_recall"][budget]) == categories
        assert set(report["flat_hybrid_units_evidence_recall"][budget]) == categories
        assert 0 <= report["flat_hybrid_units_evidence_recall"][budget]["all"] <= 1
        assert (
            report["leaves_only_evidence_recall"][budget]["all"] <= report["evidence_recall"][budget]["all"]
        )
    assert report["evidence_recall"]["2000"]["all"] >= report["evidence_recall"]["300"]["all"]


def test_fill_takes_items_in_order_and_skips_what_does_not_fit() -> None:
    t = datetime(2023, 5, 1, tzinfo=UTC)

    def unit(turn: str, chars: int) -> Item:
        return Item(turn, "unit", 1, "x" * chars, t, None, t, (turn,))

    ranked = [unit("D1:1", 40), unit("D1:2", 80), unit("D1:3", 40)]  # 10, 20, 10 tokens
    assert fill(ranked, 20) == {"D1:1", "D1:3"}
    assert fill(ranked, 30) == {"D1:1", "D1:2"}
    assert fill(ranked, 5) == set()

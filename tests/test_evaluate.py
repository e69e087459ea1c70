"""`memstream eval locomo` on the dev split (skipped when absent): the report is consistent with the
per-question items it lists, so the score can be recomputed independently."""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

import pytest

from memstream.evaluate import evaluate, questions
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
        for row in rows:
            items = row["budgets"][budget]["items"]
            assert sum(i["tokens"] for i in items) <= int(budget)
            returned = {t for i in items for t in i["source_turn_ids"]}
            recomputed.append(sum(e in returned for e in row["evidence"]) / len(row["evidence"]))
        assert report["evidence_recall"][budget]["all"] == round(statistics.mean(recomputed), 4)
        assert 0 <= report["flat_dense_units_evidence_recall"][budget]["all"] <= 1
        assert (
            report["leaves_only_evidence_recall"][budget]["all"] <= report["evidence_recall"][budget]["all"]
        )
    assert report["evidence_recall"]["2000"]["all"] >= report["evidence_recall"]["300"]["all"]

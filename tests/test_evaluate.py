"""`memstream eval locomo`: every reported mean is recomputed from the report's per-question rows alone,
through the scoring functions applied to the stored texts and contexts. A small LoCoMo-format conversation
built here always runs (hash embedder); a slice of the dev split runs when it is present."""

from __future__ import annotations

import asyncio
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from memstream.adapters.settings import EmbeddingSettings, Settings, StorageSettings
from memstream.apps.cli import main
from memstream.apps.evaluate import CATEGORIES, load
from memstream.apps.scoring import answer_recall, id_recall, text_recall
from memstream.core.recall.rank import tokens
from tests.conftest import LOCOMO

SYSTEMS = ("memstream", "hybrid", "dense", "bm25", "oracle")


def _turns(session: int, speakers: tuple[str, str], texts: list[str]) -> list[dict[str, Any]]:
    return [
        {"speaker": speakers[i % 2], "dia_id": f"D{session}:{i + 1}", "text": text}
        for i, text in enumerate(texts)
    ]


def small_locomo(path: Path) -> Path:
    """One conversation in LoCoMo's format: three sessions, a shared photo, a turn without words, and
    questions of every category, one adversarial without an answer, one answered "No", one whose answer
    is a bare year, one with a malformed evidence string and one without evidence."""
    ab = ("Ada", "Bo")
    session_1 = _turns(
        1,
        ab,
        [
            "Hi Bo! How was your week?",
            "Busy! I started a new job at the bakery on Rua Augusta last Monday.",
            "Congratulations! We adopted a grey cat named Luna from the shelter.",
            "A cat! Does Luna get along with your old dog Pepper?",
            "Mostly. I also signed up for a pottery class on Thursdays.",
            "Thanks!",
        ],
    )
    session_1[4]["blip_caption"] = "a photo of a clay bowl on a wheel"
    session_2 = _turns(
        2,
        ab,
        [
            "Bo, how is the bakery going?",
            "Early mornings at four, but I love shaping the sourdough loaves.",
            "I went hiking in the Alps with my sister in 2022 and want to go back.",
            ";)",
            "Would you ever work in an office again?",
            "Never, I hate sitting at a desk all day.",
        ],
    )
    session_3 = _turns(
        3,
        ab,
        [
            "Luna knocked my new pottery bowl off the shelf yesterday.",
            "Oh no! Did it break?",
            "Into three pieces. I will glaze a new one next class.",
            "I baked a cardamom bun recipe from my grandmother for the shop.",
        ],
    )
    sample = {
        "sample_id": "conv-small",
        "conversation": {
            "speaker_a": "Ada",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": session_1,
            "session_2_date_time": "10:04 am on 20 May, 2023",
            "session_2": session_2,
            "session_3_date_time": "7:30 pm on 2 June, 2023",
            "session_3": session_3,
            "session_4_date_time": "7:30 pm on 9 June, 2023",  # a date without turns: no session
        },
        "qa": [
            {
                "question": "What is the name of Ada's cat?",
                "answer": "Luna",
                "evidence": ["D1:3"],
                "category": 4,
            },
            {
                "question": "What hobbies does Ada have?",
                "answer": "pottery, hiking",
                "evidence": ["D1:5", "D2:3; D3:1"],
                "category": 1,
            },
            {
                "question": "When did Ada hike in the Alps?",
                "answer": 2022,
                "evidence": ["D2:3"],
                "category": 2,
            },
            {
                "question": "Would Bo enjoy an office job?",
                "answer": "Likely no, he hates sitting at a desk",
                "evidence": ["D2:6"],
                "category": 3,
            },
            {"question": "Did Bo adopt the cat?", "answer": "No", "evidence": ["D1:3"], "category": 1},
            {
                "question": "What is the name of Bo's cat?",
                "adversarial_answer": "Luna",
                "evidence": ["D1:3"],
                "category": 5,
            },
            {
                "question": "What does Bo bake?",
                "answer": "sourdough, cardamom buns",
                "evidence": [],
                "category": 3,
            },
        ],
    }
    path.write_bytes(orjson.dumps([sample]))
    return path


def recompute(report: dict[str, Any]) -> None:
    """Every row's scores from its stored texts, then every mean from the rows; asserts both."""
    rows = report["per_question"]
    for budget in report["budgets"]:
        key = str(budget)
        scores: dict[str, dict[str, list[dict[str, Any]]]] = {s: defaultdict(list) for s in SYSTEMS}
        for row in rows:
            evidence_turns = [row["evidence_turns"][e] for e in row["evidence"]]
            cell = row["budgets"][key]

            def answer(context: str, gold: str | None = row["answer"], budget: int = budget) -> float | None:
                return None if gold is None else answer_recall(gold, context, budget)

            ours = cell["memstream"]
            assert all(i["tokens"] == tokens(i["text"]) for i in ours["items"])
            recomputed: dict[str, dict[str, Any]] = {
                "memstream": {
                    "text": text_recall(evidence_turns, [i["text"] for i in ours["items"]]),
                    "answer": answer(ours["context"]),
                    "id": id_recall(
                        row["evidence"], [t for i in ours["items"] for t in i["source_turn_ids"]]
                    ),
                }
            }
            for system in SYSTEMS[1:]:
                flat = cell[system]
                lines = flat["context"].splitlines()
                assert len(lines) == len(flat["turn_ids"])
                assert len(flat["context"]) <= budget * 4  # the baselines' context fits the budget
                recomputed[system] = {
                    "text": text_recall(evidence_turns, lines),
                    "answer": answer(flat["context"]),
                }
            assert set(cell["oracle"]["turn_ids"]) <= set(row["evidence"])
            for system in SYSTEMS:
                assert cell[system]["scores"] == recomputed[system], (system, row["question"])
                for name in (CATEGORIES[row["category"]], "all"):
                    scores[system][name].append(recomputed[system])
        for system in SYSTEMS:
            assert set(report["scores"][key][system]) == set(scores[system])
            for name, cells in scores[system].items():
                reported = report["scores"][key][system][name]
                assert reported["questions"] == len(cells)
                assert reported["answered"] == sum(c["answer"] is not None for c in cells)
                for score in cells[0]:
                    values = [c[score] for c in cells if c[score] is not None]
                    assert reported[score] == (round(statistics.mean(values), 4) if values else None)


def test_the_report_is_recomputable_from_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = small_locomo(tmp_path / "small.json")
    out = tmp_path / "report.json"
    monkeypatch.setenv("MEMSTREAM_EMBEDDER", "hash")
    monkeypatch.setenv("MEMSTREAM_DATA_DIR", str(tmp_path / "data"))
    argv = ["eval", "locomo", str(data), "--budget", "40", "300", "--json", str(out), "--tenant", "acme"]
    assert main(argv) == 0
    report = orjson.loads(out.read_bytes())
    recompute(report)

    assert report["tenant"] == "acme"
    assert (report["questions"], report["skipped_questions"]) == (6, 1)
    rows = {row["question"]: row for row in report["per_question"]}
    assert rows["What hobbies does Ada have?"]["evidence"] == ["D1:5", "D2:3", "D3:1"]
    photo = (
        "Mostly. I also signed up for a pottery class on Thursdays. [shares a photo: a photo of a clay bowl"
    )
    assert rows["What hobbies does Ada have?"]["evidence_turns"]["D1:5"].startswith(photo)
    assert rows["When did Ada hike in the Alps?"]["answer"] == "2022"
    adversarial = rows["What is the name of Bo's cat?"]
    assert (adversarial["answer"], adversarial["adversarial_answer"]) == (None, "Luna")
    assert adversarial["budgets"]["300"]["memstream"]["scores"]["answer"] is None
    assert rows["Did Bo adopt the cat?"]["budgets"]["300"]["hybrid"]["scores"]["answer"] is None
    # Recall read the tenant the eval wrote: every question got items back.
    assert all(row["budgets"]["300"]["memstream"]["items"] for row in rows.values())
    # The whole conversation fits 300 tokens: the oracle holds every evidence turn.
    assert report["scores"]["300"]["oracle"]["all"]["text"] == 1.0
    hybrid = rows["What is the name of Ada's cat?"]["budgets"]["300"]["hybrid"]["context"]
    assert "[8 May 2023] Ada: Congratulations! We adopted a grey cat named Luna from the shelter." in hybrid

    printed = capsys.readouterr().out
    everything = report["scores"]["300"]["memstream"]["all"]
    assert "6 questions over 1 conversations (tenant acme" in printed
    for label in ("memstream", "flat hybrid", "flat dense", "flat BM25", "oracle"):
        assert label in printed
    assert f"{100 * everything['text']:.1f}" in printed


def test_eval_of_a_missing_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "locomo", "/nonexistent/locomo.json"]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.skipif(not LOCOMO.exists(), reason="LoCoMo dev split not present")
def test_dev_questions_have_their_evidence_turns() -> None:
    conversations, skipped = load(LOCOMO, tenant="t")
    assert skipped < 5 and sum(len(c.questions) for c in conversations) > 250
    for conv in conversations:
        assert conv.user_key == f"t/{conv.sample_id}"
        assert all(e in conv.contents for q in conv.questions for e in q.evidence)


@pytest.mark.slow  # a whole LoCoMo dev conversation through ingest, consolidation and recall
@pytest.mark.skipif(not LOCOMO.exists(), reason="LoCoMo dev split not present")
def test_a_dev_conversation_is_recomputable(tmp_path: Path) -> None:
    from memstream.apps.evaluate import evaluate

    first = orjson.loads(LOCOMO.read_bytes())[:1]
    data = tmp_path / "one.json"
    data.write_bytes(orjson.dumps(first))
    report = asyncio.run(
        evaluate(
            Settings(
                storage=StorageSettings(data_dir=tmp_path), embedding=EmbeddingSettings(embedder="hash")
            ),
            data,
            [500],
            progress=False,
        )
    )
    assert report["conversations"] == 1 and report["questions"] > 100
    recompute(report)

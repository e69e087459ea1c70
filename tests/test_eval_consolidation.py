"""`memstream eval consolidation`: the scores on hand-made examples, a row built from a hand-made timeline,
and the command end to end through a real `memstream up` on a small LoCoMo-format file, its aggregates
recomputed from the report it writes."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstream.apps import consolidation_scoring as sc
from memstream.apps.cli import main
from memstream.apps.eval_consolidation import Node, aggregate, load, sample, score_conversation

UTC_ZONE = ZoneInfo("UTC")
DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"

# A small conversation in the LoCoMo format with the three gold annotations (made up here).
SESSION_1 = [
    ("Ines", "Guess what, I finally adopted a dog from the shelter, a grey whippet called Pico."),
    ("Ravi", "That is wonderful! How is Pico settling in?"),
    ("Ines", "He sleeps all day and then sprints around the park at dusk."),
    ("Ravi", "Sounds like a happy dog. I started learning the cello this month."),
]
SESSION_2 = [
    ("Ines", "Pico chewed my running shoes, so I bought a crate for him."),
    ("Ravi", "Ha! My cello teacher says I can join the community orchestra in spring."),
    ("Ines", "That is brilliant, you practised so hard for it."),
]
PICO = "Ines adopted a grey whippet called Pico from the shelter."
DATA = [
    {
        "sample_id": "conv-pico",
        "conversation": {
            "speaker_a": "Ines",
            "speaker_b": "Ravi",
            "session_1_date_time": "6:30 pm on 12 March, 2024",
            "session_1": [
                {"speaker": s, "dia_id": f"D1:{n}", "text": t} for n, (s, t) in enumerate(SESSION_1, start=1)
            ],
            "session_2_date_time": "7:00 pm on 20 March, 2024",
            "session_2": [
                {"speaker": s, "dia_id": f"D2:{n}", "text": t} for n, (s, t) in enumerate(SESSION_2, start=1)
            ],
        },
        "observation": {
            "session_1_observation": {
                "Ines": [[PICO, "D1:1"]],
                "Ravi": [["Ravi started learning the cello.", "D1:4"]],
            },
            "session_2_observation": {
                "Ines": [["Ines bought a crate for Pico after he chewed her shoes.", "D2:1"]],
                "Ravi": [["Ravi may join the community orchestra in spring.", ["D2:2"]]],
            },
        },
        "session_summary": {
            "session_1_summary": "Ines adopted a whippet called Pico. Ravi started learning the cello.",
            "session_2_summary": "Pico chewed Ines's shoes. Ravi may join the community orchestra.",
        },
        "event_summary": {
            "events_session_1": {
                "Ines": ["Ines adopts a dog named Pico."],
                "Ravi": [],
                "date": "12 March, 2024",
            },
            "events_session_2": {"Ines": [], "Ravi": ["Ravi joins an orchestra."], "date": "20 March, 2024"},
        },
        "qa": [],
    }
]


# --- the scores --------------------------------------------------------------------------------------


def test_words_are_lowercase_content_words_without_possessives() -> None:
    assert sc.words("Melanie's kids' PAINTING of the lake, and it’s 2023!") == [
        "melanie",
        "kids",
        "painting",
        "lake",
        "2023",
    ]


def test_a_statement_leaves_its_speakers_name_out() -> None:
    assert sc.statement_words("Nate has turtles as pets.", "Nate") == {"turtles", "pets"}


def test_held_at_half_of_the_words_not_below() -> None:
    wanted = frozenset({"turtles", "pets", "cheer", "always"})
    texts = [frozenset({"turtles"}), frozenset({"turtles", "pets", "dog"})]
    match = sc.best_match(wanted, texts)
    assert (match.share, match.best) == (0.5, 1)
    assert sc.held(match)
    assert not sc.held(sc.best_match(wanted, texts[:1]))  # 1 of 4 words
    assert sc.best_match(wanted, []) == sc.Match(0.0, None)
    # Words spread over two texts are not one text holding them.
    assert not sc.held(sc.best_match(wanted, [frozenset({"turtles"}), frozenset({"pets"})]))


def test_rouge_on_a_known_pair() -> None:
    # Content words: candidate [nate, turtles, pets], reference [nate, pet, turtles, pets, cheer].
    candidate, reference = "Nate has turtles and pets.", "Nate's pet turtles, pets that cheer"
    assert sc.rouge1_f1(candidate, reference) == pytest.approx(2 * (3 / 3) * (3 / 5) / (3 / 3 + 3 / 5))
    # Reference bigrams: (nate, pet) (pet, turtles) (turtles, pets) (pets, cheer); the candidate has one.
    assert sc.rouge2_recall(candidate, reference) == 0.25
    assert sc.rouge1_f1("", reference) == 0.0
    assert sc.rouge2_recall(candidate, "turtles") == 0.0  # no reference bigram


def test_lead_is_the_raw_turns_cut_to_the_token_count() -> None:
    assert sc.lead(["A: hello there", "B: hi"], 3) == "A: hello the"
    assert sc.lead(["A: hi"], 100) == "A: hi"


def test_markup_counts_in_the_header_only() -> None:
    assert sc.has_markup("Session on 1 May 2023 (Ines, [shares a photo):\nIines: ...")
    assert not sc.has_markup("Session on 1 May 2023 (Ines, Ravi):\nInes: a photo [shares a photo: a dog]")


@given(st.text(), st.text())
def test_rouge1_f1_is_symmetric_and_bounded(a: str, b: str) -> None:
    assert sc.rouge1_f1(a, b) == pytest.approx(sc.rouge1_f1(b, a))
    assert 0.0 <= sc.rouge1_f1(a, b) <= 1.0


@given(st.text(min_size=1), st.lists(st.text()), st.text())
def test_more_memory_never_holds_less(statement: str, texts: list[str], extra: str) -> None:
    wanted = frozenset(sc.words(statement))
    if not wanted:
        return
    before = sc.best_match(wanted, [frozenset(sc.words(t)) for t in texts])
    after = sc.best_match(wanted, [frozenset(sc.words(t)) for t in [*texts, extra]])
    assert after.share >= before.share


@given(st.text())
def test_words_are_a_fixed_point(text: str) -> None:
    assert sc.words(" ".join(sc.words(text))) == sc.words(text)


# --- a row from a hand-made timeline -----------------------------------------------------------------


def at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2024, 3, day, hour, minute, tzinfo=UTC)


def test_a_row_scores_memory_splits_and_markup(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_bytes(orjson.dumps(DATA))
    [conv] = load(path)
    nodes = [
        Node("f1", "fact", 1, "Ines adopted Pico, a grey whippet (shelter).", at(12, 18, 30)),
        Node("e1", "episode", 1, "Ravi: I started learning the cello this month.", at(12, 18, 31)),
        # Session 1 became two nodes; session 2 has none.
        Node(
            "s1",
            "session",
            2,
            "Session on 12 March 2024 (Ines, Ravi):\nInes adopted a whippet called Pico.",
            at(12, 18, 30),
        ),
        Node(
            "s1b",
            "session",
            2,
            "Session on 12 March 2024 ([shares a photo):\nRavi is learning the cello.",
            at(12, 18, 31),
        ),
        Node("d1", "day", 3, "Day 12 March 2024:\nInes adopted a dog, Pico.", at(12, 0)),
    ]
    row = score_conversation(conv, nodes, UTC_ZONE)
    assert row["observations"] == {"scored": 4, "unscored": 0, "level_one": 2, "facts": 1, "raw_turns": 4}
    assert row["events"] == {"scored": 2, "unscored": 0, "day_week": 1}
    assert row["splits"] == [{"session": 1, "nodes": ["s1", "s1b"]}]
    assert row["sessions_without_node"] == [2]
    assert [m["id"] for m in row["markup_headers"]] == ["s1b"]
    first, second = row["session_scores"]
    assert first["nodes"] == ["s1", "s1b"] and first["rouge1_f1"] > first["lead_rouge1_f1"] > 0
    assert second == second | {"nodes": [], "tokens": 0, "rouge1_f1": 0.0, "lead_rouge1_f1": 0.0}
    held = row["examples"]["observations_held_by_facts"]["held"]
    assert held == [
        {
            "statement": PICO,
            "speaker": "Ines",
            "share": round(5 / 6, 4),  # adopted grey whippet pico shelter, not "called"
            "best": nodes[0].text,
        }
    ]
    scores = aggregate([row])
    assert scores["observations"]["held_by_level_one"] == 0.5
    assert scores["tokens_per_conversation"]["raw"] == row["tokens"]["raw"] > row["tokens"]["level_one"]
    assert scores["session_splits"] == 1 and scores["markup_headers"] == {"session": 1}


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b'{"sample_id": "x"}',
        b'[{"sample_id": "x"}]',
        b'[{"sample_id": "x", "conversation": []}]',
    ],
)
def test_a_file_not_in_the_locomo_format_is_refused_before_anything_starts(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "bad.json"
    data.write_bytes(content)
    assert main(["eval", "consolidation", str(data)]) == 2
    assert "is not a LoCoMo-format file" in capsys.readouterr().err


def test_a_missing_file_or_bad_timer_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "consolidation", str(tmp_path / "none.json")]) == 2
    data = tmp_path / "data.json"
    data.write_bytes(orjson.dumps(DATA))
    assert main(["eval", "consolidation", str(data), "--idle-close", "0"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_sample_keeps_the_first_conversations_and_sessions_with_their_own_gold(tmp_path: Path) -> None:
    other = {**DATA[0], "sample_id": "conv-other"}
    part = tmp_path / "part.json"
    part.write_bytes(orjson.dumps(sample([*DATA, other], conversations=1, sessions=1)))
    [conv] = load(part)
    assert conv.sample_id == "conv-pico"
    assert [s.number for s in conv.sessions] == [1] and len(conv.turns) == len(SESSION_1)
    assert {o.session for o in conv.observations} == {1} and len(conv.observations) == 2
    assert [e.text for e in conv.events] == ["Ines adopts a dog named Pico."]
    assert conv.sessions[0].summary == DATA[0]["session_summary"]["session_1_summary"]
    # None keeps everything; more sessions than there are is all of them.
    assert sample(DATA) == [{**DATA[0], "qa": []}]
    assert sample(DATA, sessions=9) == sample(DATA)


def test_a_sample_of_no_session_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.json"
    data.write_bytes(orjson.dumps(DATA))
    assert main(["eval", "consolidation", str(data), "--sessions", "0"]) == 2
    assert main(["eval", "consolidation", str(data), "--conversations", "0"]) == 2
    assert "must be at least 1" in capsys.readouterr().err


# --- the command, through a real `memstream up` ------------------------------------------------------


def run_eval(data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    env |= {"MEMSTREAM_EMBEDDER": "hash", "MEMSTREAM_LOG_LEVEL": "WARNING"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "memstream.apps.cli",
            "eval",
            "consolidation",
            str(data),
            "--json",
            str(out),
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def assert_aggregates_recompute(report: dict[str, Any]) -> None:
    rows = report["per_conversation"]
    assert report["scores"] == aggregate(rows)
    obs = [r["observations"] for r in rows]
    # And by hand, without the module's own aggregate: the shares over every scored statement.
    scored = sum(o["scored"] for o in obs)
    assert report["scores"]["observations"]["held_by_raw_turns"] == round(
        sum(o["raw_turns"] for o in obs) / scored, 4
    )
    sessions = [s for r in rows for s in r["session_scores"]]
    assert report["scores"]["sessions"]["rouge1_f1"] == round(
        sum(s["rouge1_f1"] for s in sessions) / len(sessions), 4
    )


@pytest.mark.integration
def test_the_command_measures_what_the_pipeline_wrote(tmp_path: Path) -> None:
    data, out = tmp_path / "data.json", tmp_path / "report.json"
    data.write_bytes(orjson.dumps(DATA))
    done = run_eval(data, out, "--idle-close", "3", "--timeout", "300")
    assert done.returncode == 0, done.stdout + done.stderr
    report = orjson.loads(out.read_bytes())
    assert_aggregates_recompute(report)
    [row] = report["per_conversation"]
    assert row["sample_id"] == "conv-pico" and row["turns"] == len(SESSION_1) + len(SESSION_2)
    assert row["observations"]["scored"] == 4 and row["observations"]["raw_turns"] == 4
    assert row["memories_by_kind"].get("session") == 2  # one node per session: what the pipeline wrote
    assert [s["session"] for s in row["session_scores"]] == [1, 2]
    assert "gold observations held by level-1 memory" in done.stdout
    assert "waiting for" in done.stderr  # progress goes to stderr
    # The worker's own count of what it consolidated: both sessions closed, no LLM (extractive).
    assert report["counters"]["memstream_consolidations"].get("session/done") == 2
    assert report["counters"]["memstream_llm_calls"] == {}


@pytest.mark.integration
def test_a_sample_is_replayed_and_scored_on_its_sessions_only(tmp_path: Path) -> None:
    data, out = tmp_path / "data.json", tmp_path / "report.json"
    data.write_bytes(orjson.dumps(DATA))
    done = run_eval(data, out, "--idle-close", "3", "--timeout", "300", "--sessions", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    report = orjson.loads(out.read_bytes())
    assert_aggregates_recompute(report)
    assert report["data"] == str(data) and report["sample"] == {"conversations": None, "sessions": 1}
    [row] = report["per_conversation"]
    assert row["turns"] == len(SESSION_1) and row["observations"]["scored"] == 2
    assert row["memories_by_kind"].get("session") == 1


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(not DEV.exists(), reason="the LoCoMo dev split (../shared) is not here")
def test_the_dev_split_report_recomputes(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = run_eval(DEV, out, "--idle-close", "10")
    assert done.returncode == 0, done.stdout + done.stderr
    report = orjson.loads(out.read_bytes())
    assert_aggregates_recompute(report)
    assert report["scores"]["observations"]["scored"] > 100

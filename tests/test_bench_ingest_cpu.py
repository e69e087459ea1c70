"""bench/ingest_cpu.py: the processor's CPU per turn, and a digest of what it stored that repeats
when the same turns are stored the same way and moves when anything stored differs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import ingest_cpu
from memstream.core.unit_views import context_vector, view_point
from memstream.streams import ingest


def test_the_same_turns_give_the_same_digest(tmp_path: Path) -> None:
    first = ingest_cpu.run(120, tmp_path / "a")
    second = ingest_cpu.run(120, tmp_path / "b")

    assert first["turns"] == first["units"] == 120
    assert first["views"] == first["units"]  # one view point a unit: its context and its sentences
    assert first["cpu_us_per_turn"] > 0
    assert first["digest"] == second["digest"]


def test_the_digest_moves_when_a_stored_vector_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = ingest_cpu.run(60, tmp_path / "a")
    # Every context vector turned round: the same points, one vector each different.
    monkeypatch.setattr(ingest, "context_vector", lambda own, previous: -context_vector(own, previous))
    after = ingest_cpu.run(60, tmp_path / "b")

    assert (after["units"], after["views"]) == (before["units"], before["views"])
    assert after["digest"] != before["digest"]


def test_the_digest_moves_when_a_units_sentence_rows_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = ingest_cpu.run(60, tmp_path / "a")
    # The sentence rows of every unit of several sentences in reverse order: the same vectors, stored
    # otherwise.
    monkeypatch.setattr(
        ingest, "view_point", lambda unit, rows, context: view_point(unit, rows[::-1], context)
    )
    after = ingest_cpu.run(60, tmp_path / "b")

    assert (after["units"], after["views"]) == (before["units"], before["views"])
    assert after["digest"] != before["digest"]

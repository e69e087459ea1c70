"""Questions that name a speaker: the pure functions of memstream.core.recall.speakers."""

from __future__ import annotations

import numpy as np
import pytest

from memstream.core.recall.speakers import mix, named_speakers, without_names


def test_a_query_names_a_speaker_by_every_word_of_the_name_in_any_case_or_possessive() -> None:
    speakers = ["Melanie", "Caroline", "Jon Smith"]
    assert named_speakers("Where has Melanie camped?", speakers) == ["Melanie"]
    assert named_speakers("What do melanie's kids like?", speakers) == ["Melanie"]
    assert named_speakers("What did Caroline and Melanie both paint?", speakers) == ["Caroline", "Melanie"]
    assert named_speakers("Which cities has Jon visited?", speakers) == []  # "Smith" is not named
    assert named_speakers("Where did Jon Smith go?", speakers) == ["Jon Smith"]
    assert named_speakers("Where did I go camping?", speakers) == []
    assert named_speakers("Where did Melanies go?", speakers) == []  # a word, not a prefix
    assert named_speakers("Who?", ["", "the"]) == []  # a name without content words names nothing


def test_without_names_takes_the_names_and_their_possessives_out() -> None:
    assert without_names("Where has Melanie camped?", ["Melanie"]) == "Where has camped?"
    assert without_names("What do MELANIE’s kids like?", ["Melanie"]) == "What do kids like?"
    assert without_names("Did Jon and Gina both dance?", ["Gina", "Jon"]) == "Did and both dance?"
    assert without_names("Did Jonathan call Jon?", ["Jon"]) == "Did Jonathan call ?"  # whole words only
    assert without_names("Where did Jon Smith go?", ["Jon Smith"]) == "Where did go?"
    assert without_names("Where did Jon go?", []) == "Where did Jon go?"


def test_the_mix_scores_every_vector_as_the_blend_of_the_two_cosines() -> None:
    rng = np.random.default_rng(7)

    def unit(v: np.ndarray) -> np.ndarray:
        return (v / np.linalg.norm(v)).astype(np.float32)

    query, speakerless = unit(rng.normal(size=16)), unit(rng.normal(size=16))
    mixed, scale = mix(query, speakerless, 0.3)
    assert np.linalg.norm(mixed) == pytest.approx(1.0, abs=1e-6)
    for _ in range(5):
        doc = unit(rng.normal(size=16))
        blend = 0.7 * float(doc @ query) + 0.3 * float(doc @ speakerless)
        assert scale * float(doc @ mixed) == pytest.approx(blend, abs=1e-6)
    assert mix(query, -query, 0.5) == (query, 1.0)  # nothing left to mix: the query as it is

"""The eval's scores (``memstream.apps.scoring``) follow their definitions: text-grounded evidence recall by
word
trigrams, answer recall within the budget's characters, id recall."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstream.apps.scoring import (
    Returned,
    answer_recall,
    content_words,
    id_recall,
    text_recall,
    within_budget,
    words,
)
from memstream.core.recall.rank import tokens

word = st.from_regex(r"[a-z0-9']{1,8}", fullmatch=True)
sentence = st.lists(word, min_size=1, max_size=30).map(" ".join)
punctuation = st.sampled_from([" ", ", ", "! ", ". ", " - ", "\n"])


def test_words_are_lowercase_alphanumeric_runs_with_apostrophes() -> None:
    assert words("Caroline's 2023 PRIDE-parade, [8 May]!") == [
        "caroline's",
        "2023",
        "pride",
        "parade",
        "8",
        "may",
    ]


@given(sentence, st.lists(sentence, max_size=3), st.lists(sentence, max_size=3))
def test_a_turn_is_carried_by_any_text_that_contains_it(
    turn: str, before: list[str], after: list[str]
) -> None:
    text = " ".join([*before, turn, *after])
    assert text_recall([turn], [text]) == 1.0


@given(
    st.lists(sentence, min_size=1, max_size=4), st.lists(sentence, max_size=4), st.lists(sentence, max_size=3)
)
def test_returning_more_never_lowers_text_recall(
    evidence: list[str], texts: list[str], more: list[str]
) -> None:
    assert text_recall(evidence, texts + more) >= text_recall(evidence, texts)


def test_half_of_the_trigrams_is_enough() -> None:
    turn = "we adopted two cats named luna"  # 4 trigrams
    assert not Returned(["we adopted a dog"]).carries(turn)  # no trigram
    assert Returned(["xx we adopted two", "two cats named"]).carries(turn)  # 2 of 4, from two texts
    assert not Returned(["we adopted two"]).carries(turn)  # 1 of 4


def test_trigrams_do_not_span_two_returned_texts() -> None:
    # Joined, these would hold all 3 of the turn's trigrams; apart, only "cats named luna".
    assert not Returned(["then we adopted two", "cats named luna"]).carries("adopted two cats named luna")
    assert Returned(["adopted two cats named", "luna"]).carries("adopted two cats named luna")  # 2 of 3


def test_short_turns_must_occur_whole_and_contiguous() -> None:
    assert Returned(["Oh, thanks! See you"]).carries("Thanks!")
    assert not Returned(["thanksgiving dinner"]).carries("Thanks!")
    assert Returned(["ok, bye now then"]).carries("Bye now!")
    assert not Returned(["bye for now"]).carries("Bye now!")
    assert not Returned(["bye", "now"]).carries("Bye now!")


def test_a_turn_without_words_is_never_carried() -> None:
    assert not Returned([";) ;)"]).carries(";)")


def test_text_recall_is_the_share_of_turns_carried() -> None:
    evidence = ["I started a new job at the bakery", "We moved to Porto last spring", "Bye!"]
    assert text_recall(evidence, ["Bo: I started a new job at the bakery today", "bye!"]) == pytest.approx(
        2 / 3
    )
    with pytest.raises(ValueError):
        text_recall([], ["anything"])


def test_answer_recall_counts_content_words_within_the_budget() -> None:
    assert content_words("The week before 9 June 2023") == {"week", "9", "june", "2023"}
    context = "[session 1 May 2023] Ada: we met in June" + " filler" * 40 + " 2023 week 9"
    assert answer_recall("The week before 9 June 2023", context, 100) == 1.0
    # At 10 tokens only the first 40 characters count: "june" is in, the rest is cut.
    assert within_budget(context, 10) == context[:40]
    assert answer_recall("The week before 9 June 2023", context, 10) == pytest.approx(2 / 4)  # june, 2023
    assert answer_recall("No", context, 100) is None  # only stop words
    assert answer_recall("Luna", "Lunar eclipse", 100) == 0.0  # whole words only


@given(sentence, st.integers(min_value=0, max_value=200))
def test_an_answer_is_found_in_itself_when_the_budget_holds_it(answer: str, budget: int) -> None:
    score = answer_recall(answer, answer, budget)
    if not content_words(answer):
        assert score is None
    elif len(answer) <= budget * 4:
        assert score == 1.0
    else:
        assert score is not None and 0.0 <= score <= 1.0


def test_id_recall_reads_the_returned_ids() -> None:
    assert id_recall(["D1:1", "D2:3"], ["D2:3", "D9:9"]) == 0.5
    assert id_recall(["D1:1"], []) == 0.0
    with pytest.raises(ValueError):
        id_recall([], ["D1:1"])


def test_tokens_are_characters_over_four_rounded_up() -> None:
    assert [tokens(""), tokens("abcd"), tokens("abcde")] == [0, 1, 2]

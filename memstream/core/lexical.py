"""Recall's words: one tokenizer, and text -> sparse vector for the store's lexical (BM25) search.

A document's sparse vector carries BM25's term-frequency half, saturated and length-normalised; the store
supplies the other half, each term's IDF over the collection (Qdrant's ``Modifier.IDF``), so the store's
dot product of a query vector (1 per distinct term) with a document vector is the document's Okapi BM25.
Pure functions: every process (worker, gateway, eval) encodes a text the same way.

Token ids are CRC-32 of the token's UTF-8 bytes, not a vocabulary: stable across processes and versions
with nothing to store. Two tokens sharing an id (about one pair in 2**32 / vocabulary) merge into one term.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from functools import lru_cache
from itertools import filterfalse

from memstream.core.store import SparseVector

# Okapi BM25's usual parameters, for the stored vectors and rank.bm25_scores alike.
K1 = 1.2
B = 0.75
# The fixed average length (in content tokens) documents are normalised against. BM25 takes it from the
# corpus; a store-wide figure would change as units arrive and make stored vectors stale, so it is a
# constant: a chat turn of one or two messages holds about 13-16 content words (LoCoMo turns: 14.4 on
# average). A wrong value only shifts how much length matters, the same for every document.
AVG_LENGTH = 16.0

# A small English stop-word list: enough to stop "what/did/the" from dominating BM25 on short questions.
_STOP_WORDS = """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves"""
STOP_WORDS = frozenset(_STOP_WORDS.split())
_TOKEN = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lowercase ``[a-z0-9]+`` runs, stop words left out, in text order."""
    return list(filterfalse(STOP_WORDS.__contains__, _TOKEN.findall(text.lower())))


# Suffixes ``stem`` takes off, the first that fits: -ies to -y, then -ing, -ed, -es, -s.
_SUFFIXES = (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""))


@lru_cache(maxsize=65536)
def stem(token: str) -> str:
    """A light English stem, so that inflections of one word meet: "camped", "camping" and "camps" ->
    "camp"; "cities" and "city" -> "city"; "dance", "danced", "dancing" -> "danc". The first of
    -ies (-> -y), -ing, -ed, -es, -s that leaves at least three letters comes off (not the -s of -ss),
    then a final -e of a stem longer than three letters. Recall's BM25 over its candidates only
    (``rank.leaf_scores``); the store's sparse vectors hold the words as ``tokenize`` gives them."""
    for suffix, replacement in _SUFFIXES:
        if token.endswith(suffix) and len(token) - len(suffix) >= 3 and not token.endswith("ss"):
            token = token[: -len(suffix)] + replacement
            break
    return token[:-1] if len(token) > 3 and token.endswith("e") else token


def token_id(token: str) -> int:
    return zlib.crc32(token.encode())


def encode_document(text: str, avg_length: float = AVG_LENGTH) -> SparseVector:
    """BM25's term weight without IDF, per distinct token: tf·(k1+1) / (tf + k1·(1 - b + b·len/avg))."""
    tokens = tokenize(text)
    norm = K1 * (1 - B + B * len(tokens) / avg_length)
    counts = Counter(map(token_id, tokens))
    # Straight into sorted tuples: ingest encodes every unit, and the intermediate dict cost ~10 %.
    indices = tuple(sorted(counts))
    weights = tuple(tf * (K1 + 1) / (tf + norm) for tf in map(counts.__getitem__, indices))
    return SparseVector(indices, weights)


def encode_query(text: str) -> SparseVector:
    """1.0 per distinct token: the store's IDF weighs the terms, as BM25 counts each query term once."""
    return _sorted(dict.fromkeys(map(token_id, tokenize(text)), 1.0))


def _sorted(weights: dict[int, float]) -> SparseVector:
    indices = sorted(weights)
    return SparseVector(tuple(indices), tuple(weights[i] for i in indices))

"""Feature-hashing embedder: signed word unigrams + bigrams, no model, no state.

Lexical only (no synonyms), but deterministic across processes and fast enough that the
embedder is never the bottleneck of the ingest benchmark. Words are lower-cased ``\\w+`` runs;
a small stop-word list is dropped first, otherwise the function words every chat line shares
("i", "you", "the") would dominate the cosine between unrelated exchanges.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache
from itertools import filterfalse

import numpy as np
import numpy.typing as npt

from memstream.core.embedder import Vectors

_WORD = re.compile(r"\w+")
_STOP_WORDS_TEXT = """
a about all also am an and any are as at be been but by can could did do does for from had has have
he her him his how i if in into is it its just me my no not of on or our out she so than that the
their them then there they this to too us was we were what when where which who will with would you your
"""
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
# splitmix64 constants: mix two word hashes into a well-spread bigram hash (order-sensitive).
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@lru_cache(maxsize=1 << 18)
def _word_hash(word: str) -> int:
    # blake2b, not hash(): str hashing is salted per process and vectors must be stable.
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


class HashingEmbedder:
    name = "hash"
    #: fires on ~10% of LoCoMo dev units (rule and table: memstream.apps.calibrate)
    default_theta_sim = 0.30

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def _words(self, text: str) -> list[int]:
        # map/filterfalse over C callables: ~13 % cheaper than comprehensions (ingest embeds every turn).
        hashes = list(map(_word_hash, filterfalse(_STOP_WORDS.__contains__, _WORD.findall(text.lower()))))
        # A text with no content words still needs a unit vector: hash the raw text instead.
        return hashes or [_word_hash(text.strip())]

    def embed(self, texts: Sequence[str]) -> Vectors:
        per_text = [self._words(t) for t in texts]
        counts = np.fromiter((len(h) for h in per_text), dtype=np.int64, count=len(per_text))
        uni = np.fromiter((h for hs in per_text for h in hs), dtype=np.uint64, count=int(counts.sum()))
        row = np.repeat(np.arange(len(texts), dtype=np.int64), counts)
        # Bigrams are consecutive words of the same text: drop pairs that straddle two texts.
        same = row[1:] == row[:-1]
        bi = _mix(uni[:-1][same] * _GOLDEN ^ uni[1:][same])
        feats = np.concatenate([uni, bi])
        rows = np.concatenate([row, row[1:][same]])
        # Low bits pick the bucket, the top bit the sign (signed hashing keeps collisions unbiased).
        bucket = (feats % np.uint64(self.dim)).astype(np.int64)
        sign = 1.0 - 2.0 * (feats >> np.uint64(63)).astype(np.float64)
        flat = np.bincount(rows * self.dim + bucket, weights=sign, minlength=len(texts) * self.dim)
        vecs = flat.reshape(len(texts), self.dim).astype(np.float32)
        # n words give 2n-1 features of weight ±1, an odd sum, so no row is all zeros.
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs

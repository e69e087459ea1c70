"""Any OpenAI-compatible ``/v1/embeddings`` endpoint through the ``openai`` client.

Retries are the client's own: exponential backoff with jitter on 408/409/429/5xx, connection
errors and timeouts, honouring ``Retry-After``/``Retry-After-Ms``, up to ``max_retries`` times.
Whatever still fails surfaces as one :class:`EmbeddingError` naming the endpoint and model.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import openai

from memstream.core.embedder import Vectors


class EmbeddingError(RuntimeError):
    """The embeddings endpoint failed (after retries) or answered something unusable."""


class OpenAIEmbedder:
    name = "openai"
    #: NOT calibrated here (no endpoint in the dev environment): a starting point for
    #: text-embedding-3-small, whose cosines run lower than MiniLM's; run ``memstream calibrate``.
    default_theta_sim = 0.5

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str = "text-embedding-3-small",
        dim: int = 1536,
        batch_size: int = 64,
        timeout_s: float = 30.0,
        max_retries: int = 5,
    ) -> None:
        self.dim = dim
        self.model = model
        self.batch_size = batch_size
        #: tokens billed so far, from the responses' ``usage`` (for metrics)
        self.total_tokens = 0
        self._client = openai.OpenAI(
            base_url=base_url,
            # Local OpenAI-compatible servers often need no key; the client insists on one.
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "unset",
            timeout=timeout_s,
            max_retries=max_retries,
        )

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            out[start : start + len(batch)] = self._embed_batch(batch)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out

    def _embed_batch(self, batch: list[str]) -> Vectors:
        try:
            response = self._client.embeddings.create(model=self.model, input=batch, encoding_format="float")
        except openai.APIError as exc:
            raise EmbeddingError(
                f"embeddings request to {self._client.base_url} (model {self.model!r}) failed: {exc}"
                f" (429/5xx/timeouts were retried {self._client.max_retries} times)"
            ) from exc
        if len(response.data) != len(batch):
            raise EmbeddingError(f"asked for {len(batch)} embeddings, got {len(response.data)}")
        if response.usage is not None:
            self.total_tokens += response.usage.total_tokens
        # The API returns items with an index; don't rely on their order.
        vectors = np.array([d.embedding for d in sorted(response.data, key=lambda d: d.index)], np.float32)
        if vectors.shape[1] != self.dim:
            raise EmbeddingError(
                f"model {self.model!r} returned {vectors.shape[1]}-d vectors but"
                f" MEMSTREAM_OPENAI_EMBEDDING_DIM is {self.dim}: set it to {vectors.shape[1]}"
            )
        return vectors

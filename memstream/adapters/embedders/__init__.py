"""Embedders: texts in, L2-normalised float32 vectors out (see :class:`Embedder`).

Backends are imported on demand so that choosing ``hash`` never loads onnxruntime or openai.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstream.core.embedder import Embedder, Vectors

if TYPE_CHECKING:
    from memstream.adapters.settings import EmbeddingSettings

__all__ = ["Embedder", "Vectors", "make_embedder"]


def make_embedder(settings: EmbeddingSettings) -> Embedder:
    """The embedder ``settings.embedder`` names, configured from the settings."""
    if settings.embedder == "hash":
        from memstream.adapters.embedders.hashing import HashingEmbedder

        return HashingEmbedder(dim=settings.hash_dim)
    if settings.embedder == "openai":
        from memstream.adapters.embedders.openai_embedder import OpenAIEmbedder

        return OpenAIEmbedder(
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key.get_secret_value() if settings.openai_api_key else None,
            model=settings.openai_embedding_model,
            dim=settings.openai_embedding_dim,
            batch_size=settings.embed_batch_size,
            timeout_s=settings.openai_timeout_s,
            max_retries=settings.openai_max_retries,
        )
    from memstream.adapters.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder(
        tokenizer=settings.minilm_tokenizer,
        threads=settings.minilm_threads,
        batch_size=settings.embed_batch_size,
    )

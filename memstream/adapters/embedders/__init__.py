"""Embedders: texts in, L2-normalised float32 vectors out (see :class:`Embedder`).

Backends are imported on demand so that choosing ``hash`` never loads onnxruntime or openai.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstream.core.embedder import Embedder, Vectors

if TYPE_CHECKING:
    from memstream.adapters.settings import Settings

__all__ = ["Embedder", "Vectors", "make_embedder"]


def make_embedder(settings: Settings) -> Embedder:
    """The embedder ``settings.embedding.embedder`` names, configured from the settings."""
    if settings.embedding.embedder == "hash":
        from memstream.adapters.embedders.hashing import HashingEmbedder

        return HashingEmbedder(dim=settings.embedding.hash_dim)
    if settings.embedding.embedder == "openai":
        from memstream.adapters.embedders.openai_embedder import OpenAIEmbedder

        return OpenAIEmbedder(
            base_url=settings.embedding.openai_base_url,
            api_key=settings.embedding.openai_api_key.get_secret_value()
            if settings.embedding.openai_api_key
            else None,
            model=settings.embedding.openai_embedding_model,
            dim=settings.embedding.openai_embedding_dim,
            batch_size=settings.embedding.embed_batch_size,
            timeout_s=settings.embedding.openai_timeout_s,
            max_retries=settings.embedding.openai_max_retries,
        )
    from memstream.adapters.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder(
        tokenizer=settings.embedding.minilm_tokenizer,
        threads=settings.embedding.minilm_threads,
        batch_size=settings.embedding.embed_batch_size,
    )

"""Adapters: the broker, the store, the embedders, the LLM client, settings and metrics."""

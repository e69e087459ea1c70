"""Consumers of the pipeline's output topics.

Planned here (issue 3, not built yet): the recurrence consolidator reading ``consolidation``,
the TiMem summarizers reading ``windows``, and the indexer that materialises
``memory.updates`` into the ``memories`` collection.
"""

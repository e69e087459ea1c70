"""Recall: pure functions that turn a query and memories into a ranked, budgeted context.

The way in is ``engine.recall(store, embedder, ask, config)``: an ``engine.Ask`` and a
``config.RecallConfig`` in, an ``engine.Recalled`` out; ``wire`` carries the two between processes."""

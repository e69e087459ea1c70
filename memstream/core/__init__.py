"""The core: pure logic and the collection layouts, over schemas and the store and embedder protocols."""

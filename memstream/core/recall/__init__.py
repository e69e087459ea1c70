"""Recall: pure functions that turn a query and memories into a ranked, budgeted context."""

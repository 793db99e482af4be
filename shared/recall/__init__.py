"""Recall: every message an agent ever exchanged, searchable with CJK-aware BM25."""

"""Semantic deduplication: near-duplicates by meaning (embeddings, cosine similarity)."""

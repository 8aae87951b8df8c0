"""SPLADE (sentence-transformers' SparseEncoder): a weight per vocabulary id."""

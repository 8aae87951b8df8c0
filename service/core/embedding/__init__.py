"""The embedding capability: dense, sparse and multi-vector outputs, prompts, truncation and embedding types."""

"""The ranking capability: Rerank and Classify through cross-encoders."""

"""BART checkpoints (bart-large-cnn, distilbart): one-language summaries and rewrites."""

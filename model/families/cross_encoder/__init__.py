"""Cross-encoders and classifiers (sentence-transformers' CrossEncoder over BERT or XLM-RoBERTa)."""

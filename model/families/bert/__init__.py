"""BERT-family sentence-embedding checkpoints (sentence-transformers' BERT and XLM-RoBERTa encoders)."""

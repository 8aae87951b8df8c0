"""Pegasus checkpoints (pegasus-xsum, pegasus-cnn_dailymail, pegasus-large): abstractive summaries."""

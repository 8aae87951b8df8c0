"""T5's family: T5, T5 v1.1 and Flan-T5, mT5, UMT5, MADLAD-400, ByT5 (encoder-decoders with relative position bias)."""

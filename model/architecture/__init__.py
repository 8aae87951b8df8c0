"""The Transformer of "Attention Is All You Need" that every family is read into: attention, the stacks, the
decoder's caches, and a model directory's weights on disk."""

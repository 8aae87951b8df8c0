"""One folder per checkpoint family: its importer into our Transformer, and its random checkpoints for tests
(docs/adding-a-family.md)."""

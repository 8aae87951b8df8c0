"""The translation capability: documents, languages, detection, routing by pair, and word alignment."""

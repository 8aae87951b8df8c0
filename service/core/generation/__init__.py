"""The generation capability: Generate and its streams."""

"""The served models: opened from their directories, typed, loaded and started, found by name, and their health."""

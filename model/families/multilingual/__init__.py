"""The families with a target language per request: M2M100, NLLB-200 and mBART-50."""

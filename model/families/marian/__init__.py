"""MarianMT (opus-mt) checkpoints: one pair, or several targets by a >>xxx<< token."""

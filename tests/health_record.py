"""A health report (engine/steps.py's HealthReport) that records what the engine told it, for the engine's tests."""

from __future__ import annotations


class HealthRecord:
    def __init__(self):
        self.calls: list[str] = []

    def failed(self) -> None:
        self.calls.append("failed")

    def succeeded(self) -> None:
        self.calls.append("succeeded")

"""Whether each model works: consecutive failed model calls turn it unhealthy, and a probe through the
serving path (each served model's probe(), in served_models.py) turns it healthy again."""

from __future__ import annotations


class ModelHealth:
    """Consecutive failed model calls. Past the threshold the model is unhealthy; any call that passes
    (a request's, or a probe's) makes it healthy again."""

    def __init__(self, threshold: int, on_change):
        self.threshold, self.on_change = threshold, on_change
        self.failures = 0
        self.healthy = True

    def succeeded(self) -> None:
        self.failures = 0
        if not self.healthy:
            self.healthy = True
            self.on_change()

    def failed(self) -> None:
        self.failures += 1
        if self.healthy and self.failures >= self.threshold:
            self.healthy = False
            self.on_change()

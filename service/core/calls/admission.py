"""Which calls may start: none while the models load or the server drains, and at most
max_concurrent_requests at once. Done by the core, not by a transport's own limit (grpcio's
maximum_concurrent_rpcs would turn away health checks too)."""

from __future__ import annotations

from ...errors import Overloaded, Unavailable


class Admission:
    def __init__(self, max_concurrent: int):
        self.max_concurrent = max_concurrent
        self.loaded = False
        self.draining = False
        self.in_flight = 0

    def admit(self) -> None:
        """Count a call in, or refuse it (Unavailable, Overloaded). Each admitted call must leave()."""
        if self.draining:
            raise Unavailable("the server is shutting down; retry on another replica")
        if not self.loaded:
            raise Unavailable("the server is starting: models are loading")
        if self.in_flight >= self.max_concurrent:
            raise Overloaded(
                f"{self.in_flight} calls are in progress, the most this server takes at once "
                f"(max_concurrent_requests {self.max_concurrent}); retry later"
            )
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight -= 1

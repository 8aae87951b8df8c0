"""One record per call, whichever front door took it: its id, method, model, status and figures;
counted in the metrics and written as one JSON access-log line when the call ends."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from .metrics import Metrics

access_log = logging.getLogger("attnserve.access")

REQUEST_ID_HEADER = "x-request-id"
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


def request_id(headers: Iterable[tuple[str, object]] | None) -> str:
    """The caller's x-request-id when it is a sane token, else a new one (never unbounded user text)."""
    for key, value in headers or ():
        if key == REQUEST_ID_HEADER and isinstance(value, str) and _SAFE_ID.match(value):
            return value
    return uuid.uuid4().hex


@dataclass(eq=False)  # one record per call: two are never equal, and each can be kept in a set
class CallRecord:
    rpc: str
    id: str
    metrics: Metrics
    started: float = field(default_factory=time.perf_counter)
    model: str = ""  # a served model's name once the call names one; "" before (or for an unknown one)
    code: str = "OK"  # the status the front door answered with, by its name (gRPC's names)
    figures: dict = field(default_factory=dict)  # token counts and timings for the access log
    closed: bool = False

    def use_model(self, name: str) -> None:
        """The call's model; counted running once, however many of the call's parts use it (an HTTP
        completion with several prompts)."""
        if self.model == name:
            return
        if self.model:
            self.metrics.requests_running.labels(self.model).dec()
        self.model = name
        self.metrics.requests_running.labels(name).inc()

    def close(self) -> None:
        self.closed = True
        seconds = time.perf_counter() - self.started
        self.metrics.requests.labels(self.rpc, self.model, self.code).inc()
        self.metrics.request_duration.labels(self.rpc, self.model).observe(seconds)
        if self.model:
            self.metrics.requests_running.labels(self.model).dec()
        access_log.info(
            "%s %s %s %.1f ms", self.rpc, self.model or "-", self.code, seconds * 1e3,
            extra={"request_id": self.id, "rpc": self.rpc, "model": self.model, "code": self.code,
                   "seconds": round(seconds, 6), **self.figures},
        )  # fmt: skip

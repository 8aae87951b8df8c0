"""One record per call, whichever front door took it: its id, method, model, status and figures;
counted in the metrics (always) and written as one JSON access-log line when the call ends (every refused
or failed call's; of the answered ones, the share the server's access_log_share asks for)."""

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


class AccessLog:
    """Which calls get an access-log line: all that were not answered OK, and `answered_share` (0 to 1) of
    those that were, spread evenly (a line whenever the share's running count passes a whole number: with
    0.25, the 4th, 8th, ...; 0: none): at thousands of calls a second, a line costs more than the call's
    own work does."""

    def __init__(self, answered_share: float = 1.0):
        self.answered_share = answered_share
        self.answered = 0

    def wanted(self, record: CallRecord) -> bool:
        if record.code != record.ok or self.answered_share >= 1.0:
            return True
        before, self.answered = self.answered, self.answered + 1
        return int(self.answered * self.answered_share) > int(before * self.answered_share)

    def write(self, record: CallRecord, seconds: float) -> None:
        if not self.wanted(record):
            return
        access_log.info(
            "%s %s %s %.1f ms",
            record.rpc,
            record.model or "-",
            record.code,
            seconds * 1e3,
            extra={
                "request_id": record.id,
                "rpc": record.rpc,
                "model": record.model,
                "code": record.code,
                "seconds": round(seconds, 6),
                **record.figures,
            },
        )


EVERY_CALL = AccessLog()


@dataclass(eq=False)  # one record per call: two are never equal, and each can be kept in a set
class CallRecord:
    rpc: str
    id: str
    metrics: Metrics
    started: float = field(default_factory=time.perf_counter)
    model: str = ""  # a served model's name once the call names one; "" before (or for an unknown one)
    code: str = "OK"  # the status the front door answered with, by its name (gRPC's names)
    ok: str = "OK"  # the door's status of an answered call
    access: AccessLog = EVERY_CALL
    figures: dict = field(default_factory=dict)  # token counts and timings for the access log
    closed: bool = False

    def use_model(self, name: str) -> None:
        """The call's model; counted running once, however many of the call's parts use it (an HTTP
        completion with several prompts)."""
        if self.model == name:
            return
        running = self.metrics.requests_running
        if self.model:
            self.metrics.child(running, self.model).dec()
        self.model = name
        self.metrics.child(running, name).inc()

    def close(self) -> None:
        self.closed = True
        seconds = time.perf_counter() - self.started
        metrics = self.metrics
        metrics.child(metrics.requests, self.rpc, self.model, self.code).inc()
        metrics.child(metrics.request_duration, self.rpc, self.model).observe(seconds)
        if self.model:
            metrics.child(metrics.requests_running, self.model).dec()
        self.access.write(self, seconds)

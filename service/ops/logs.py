"""Log output: one JSON object a line (the default, for collectors), or plain text for people.
Fields given to a log call with extra={...} (the access log's request id, model, status, figures)
become fields of its JSON object."""

from __future__ import annotations

import json
import logging
import math
import sys
from datetime import datetime, timezone

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def __init__(self, process: str = "") -> None:
        super().__init__()
        self.process = {"process": process} if process else {}
        self._second, self._second_text = -1, ""  # the last second written, as ISO 8601 up to its seconds

    def timestamp(self, created: float) -> str:
        """ISO 8601 with milliseconds, in UTC; the date and time part made once a second."""
        fraction, whole = math.modf(created)  # rounded as datetime.fromtimestamp rounds it
        second, micro = divmod(int(whole) * 1_000_000 + round(fraction * 1e6), 1_000_000)
        if second != self._second:
            self._second = second
            self._second_text = datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{self._second_text}.{micro // 1000:03d}+00:00"

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **self.process,
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str, format: str, process: str = "") -> None:
    """process: which of a split server's processes logs (engine, api-1, ...; --api-processes); "": the one."""
    # Neither format writes a record's source line, thread or process: looking them up would cost every
    # log call (each call's access line among them) more than writing it does (the logging HOWTO's
    # "Optimization").
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    if format == "json":
        handler.setFormatter(JsonFormatter(process))
    else:
        where = f" [{process}]" if process else ""
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s{where} %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

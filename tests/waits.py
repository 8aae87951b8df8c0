"""Waiting for a condition, never for a fixed time: tests must pass on a busy machine too."""

from __future__ import annotations

import time
from collections.abc import Callable

PATIENCE = 60.0  # seconds: generous, since only a broken server makes a test wait this long


def wait_until(condition: Callable[[], object], timeout: float = PATIENCE, what: str = "") -> object:
    """Poll condition() until it returns something true, and return that; AssertionError after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what or condition}")
        time.sleep(0.01)


def wait_while_progressing(
    condition: Callable[[], object], progress: Callable[[], object], patience: float = PATIENCE, what: str = ""
) -> object:
    """Poll condition() until it returns something true, and return that; AssertionError only once progress()
    has not changed for `patience` seconds. For conditions at the end of finite work whose time grows with
    how busy the machine is (a stall that comes only once megabytes are generated)."""
    last, still_since = progress(), time.monotonic()
    while True:
        value = condition()
        if value:
            return value
        now, current = time.monotonic(), progress()
        if current != last:
            last, still_since = current, now
        elif now - still_since > patience:
            raise AssertionError(f"no progress for {patience:g} s: {what or condition}")
        time.sleep(0.01)

"""The tests' waits: wait_while_progressing gives up only once its progress has stood still."""

from __future__ import annotations

import itertools
import time

import pytest

from .waits import wait_while_progressing


def test_waits_past_its_patience_while_progress_is_made():
    ticks = itertools.count()  # progress: a new value at every look
    start = time.monotonic()
    # True only after four patiences: a wait that gave up at its patience would raise long before.
    assert (
        wait_while_progressing(lambda: time.monotonic() - start > 0.2 and "done", lambda: next(ticks), 0.05) == "done"
    )


def test_gives_up_once_progress_stands_still():
    with pytest.raises(AssertionError, match="no progress for 0.05 s: the thing"):
        wait_while_progressing(lambda: False, lambda: 7, patience=0.05, what="the thing")

"""The tests' waits: wait_while_progressing gives up only once its progress has stood still."""

from __future__ import annotations

import itertools
import time

import pytest

from .waits import wait_while_progressing


def test_waits_past_its_patience_while_progress_is_made():
    ticks = itertools.count()  # progress: a new value at every look
    polls = itertools.count()
    start = time.monotonic()
    assert wait_while_progressing(lambda: next(polls) >= 30 and "done", lambda: next(ticks), patience=0.05) == "done"
    assert time.monotonic() - start > 0.05  # 30 polls 10 ms apart: past the patience, yet no error


def test_gives_up_once_progress_stands_still():
    with pytest.raises(AssertionError, match="no progress for 0.05 s: the thing"):
        wait_while_progressing(lambda: False, lambda: 7, patience=0.05, what="the thing")

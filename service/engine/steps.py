"""The typed seams of the scheduler's turn (engine/scheduler.py): its settings, the plan that schedule
hands execute, the result that execute hands update, and the health it reports to. Per-row values are
arrays over the step's rows, in row order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .sequence import Sequence

BEAM_ROW = -1  # in StepResult.tokens: a beam search's row, whose tokens its search chose


class HealthReport(Protocol):
    """What a model loop tells of its model calls (core/models/health.py ModelHealth)."""

    def failed(self) -> None: ...

    def succeeded(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class SchedulerSettings:
    bos_id: int  # the decoder's start token
    pad_id: int
    max_waiting: int  # sequences that may wait for a cache row; more are refused (QueueFull)
    encode_split_cost: int = 64  # one more encoder call's cost in padded tokens (batcher.split_by_length)
    windows_per_encode: int = 16  # audio windows (30 s, 1,500 positions each) the encoder takes in one call
    name: str = ""  # the model's, for logs


@dataclass(frozen=True)
class StepPlan:
    """One turn's work, as schedule leaves it: the sequences admitted this turn (their sources to encode),
    and every row's holder, in row order. (Each row's next input token is in the scheduler's row arrays,
    engine/rows.py.)"""

    admitted: list[Sequence]
    holders: list  # Sequence or BeamRow, one per row

    @property
    def rows(self) -> int:
        return len(self.holders)


@dataclass(frozen=True)
class ModelCall:
    """One model call of a turn, for the metrics."""

    stage: str  # encode | decode
    inputs: int  # sources, or rows
    positions: int  # padded token positions
    seconds: float
    sent: int  # bytes to the device
    fetched: int  # bytes back


@dataclass(frozen=True)
class StepResult:
    """What execute leaves for update: each row's next token (BEAM_ROW for a beam search's rows), the
    model calls it made, and the rows whose token choice raised (their sequences fail)."""

    tokens: np.ndarray  # (rows,) int64
    calls: list[ModelCall]
    failures: dict[int, Exception]  # by row

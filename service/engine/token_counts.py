"""What a step's tokens add to each row's books of time and to the model's metrics: the time to its first
token (once a sequence), the time since its last one, and the tokens generated."""

from __future__ import annotations

import numpy as np

from ..ops.metrics import ModelMetrics
from .rows import RowState


def count_tokens(
    state: RowState,
    metrics: ModelMetrics | None,
    holders: list,
    chosen: np.ndarray | None,
    grown: np.ndarray,
    now: float,
) -> None:
    """Each chosen row's (`chosen` None: every row's) time to its first token (once a sequence) or since
    its last one, and the tokens the step added (`grown`: their rows)."""
    count = len(holders)
    last_time = state.last_time[:count]
    first = None
    if state.awaiting_first:
        first = last_time == 0.0
        if chosen is not None:
            first &= chosen
        for i in first.nonzero()[0].tolist():
            sequence = holders[i]
            sequence.first_token = now
            state.awaiting_first -= 1
            if metrics and state.counted[i]:
                metrics.first_token(now - sequence.arrived)
    if metrics:
        counted = state.counted[:count]
        metrics.generated(int(np.count_nonzero(counted[grown])))
        timed = counted if first is None else counted & ~first
        if chosen is not None:
            timed = timed & chosen
        metrics.between_tokens_all(now - last_time[timed])
    if chosen is None:
        last_time[:] = now
    else:
        last_time[chosen] = now

"""What one more model call costs, in padded tokens, measured on the model itself at warm-up: the price
that split_by_length weighs against the padding a cut saves.

A call's time is about a fixed part (the runtime's per-operator overhead, and on a CPU each weight read
once) plus a part per padded token. Their ratio depends on the model and the machine: measured on a
2-core AVX2 EPYC, MiniLM's fixed part is worth about 10 tokens, an M2M100-418M-shaped encoder's 6 in int8
and 9-14 in float32; on a GPU, where a short call is launch-bound, far more. The one price every model had
(64) cut too rarely: the measured price ran these encoders 1.07x-1.16x faster (docs/benchmarks.md, "Each
model's split price, measured at warm-up")."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

MEASURED = -1  # the split_cost_tokens setting that asks for the measurement (the default)
UNMEASURED_PRICE = 64  # until measured, and where a model cannot be: MiniLM's hand-tuned price
PROBE_TOKENS = 32  # the longer probe call's length (capped by the model's inputs): a sentence's
PROBE_ROUNDS = 5  # medians of this many calls of each length, taken in turns
MAX_PRICE = 4096  # where a longer call costs no more than a short one (a GPU): cut only to save a great deal


def measure_call_price(run: Callable[[int], None], longer: int, clock: Callable[[], float] = time.perf_counter) -> int:
    """run(n) makes one model call of one input of n tokens, n 1 or `longer` (its inputs made beforehand:
    only the call is timed). -> the fixed part of a call in tokens of the per-token part: (time of 1
    token) / (time of each token more) - 1, from 1 to MAX_PRICE; UNMEASURED_PRICE where longer < 2."""
    if longer < 2:
        return UNMEASURED_PRICE
    short_times, long_times = [], []
    run(1), run(longer)  # first calls at a new shape plan and allocate
    for _ in range(PROBE_ROUNDS):
        short_times.append(_timed(run, 1, clock))
        long_times.append(_timed(run, longer, clock))
    short, long = statistics.median(short_times), statistics.median(long_times)
    per_token = (long - short) / (longer - 1)
    if per_token <= short / MAX_PRICE:
        return MAX_PRICE
    return max(1, min(MAX_PRICE, round(short / per_token - 1)))


def _timed(run: Callable[[int], None], tokens: int, clock: Callable[[], float]) -> float:
    started = clock()
    run(tokens)
    return clock() - started

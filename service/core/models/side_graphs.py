"""A model's side graphs as the core calls them (the attention-map graph; a speech model's word-alignment
graph): each run queued in the model thread, counted, and timed in the model's metrics."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor

from ...ops.metrics import ModelMetrics


class SideGraphCalls:
    """One side graph of a model, run in the model thread between (never alongside) the batches and decode
    steps of its serving graphs. runner: its run() takes a call's arguments; stage: its metrics' label."""

    def __init__(self, runner, executor: Executor, metrics: ModelMetrics | None = None, stage: str = "attention"):
        self.runner, self.executor, self.metrics, self.stage = runner, executor, metrics, stage
        self.calls = 0  # graph runs completed

    def submit(self, *args, positions: int):
        """Queue one run -> a future of what the runner returns. The run goes ahead even if the caller stops
        waiting (a model call cannot be taken back from the thread's queue): await it shielded, and count it
        as running until the future is done. positions: the call's size, for the metrics."""
        started = time.perf_counter()
        future = asyncio.get_running_loop().run_in_executor(self.executor, self.runner.run, *args)

        def ran(done: asyncio.Future) -> None:
            if done.cancelled() or done.exception() is not None:
                return
            self.calls += 1
            if self.metrics:
                self.metrics.model_call(self.stage, 1, positions, time.perf_counter() - started)

        future.add_done_callback(ran)
        return future

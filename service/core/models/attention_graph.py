"""One model's attention-map graph as the core calls it: each run queued in the model thread, counted, and
timed in the model's metrics."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor

from ...ops.metrics import ModelMetrics
from ...runner.attention_maps import AttentionMapsRunner


class AttentionGraphCalls:
    """One model's attention-map graph, run in the model thread between (never alongside) the batches
    and decode steps of its serving graphs."""

    def __init__(self, runner: AttentionMapsRunner, executor: Executor, metrics: ModelMetrics | None = None):
        self.runner, self.executor, self.metrics = runner, executor, metrics
        self.calls = 0  # graph runs completed

    def submit(self, source_ids: list[int], target_ids: list[int] | None, layers: dict[str, list[int]]):
        """Queue one run -> a future of its Maps. The run goes ahead even if the caller stops waiting (a
        model call cannot be taken back from the thread's queue): await it shielded, and count it as
        running until the future is done."""
        started = time.perf_counter()
        future = asyncio.get_running_loop().run_in_executor(
            self.executor, self.runner.run, source_ids, target_ids, layers
        )

        def ran(done: asyncio.Future) -> None:
            if done.cancelled() or done.exception() is not None:
                return
            self.calls += 1
            if self.metrics:
                positions = len(source_ids) + len(target_ids or ())
                self.metrics.model_call("attention", 1, positions, time.perf_counter() - started)

        future.add_done_callback(ran)
        return future

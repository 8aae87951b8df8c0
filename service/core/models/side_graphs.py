"""A model's side graphs as the core calls them (the attention-map graph; a speech model's word-alignment
graph): each run queued in the model thread, counted, and timed in the model's metrics; runs of one kind
asked for while one runs gathered into the next batch."""

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
        self.gathered: list[tuple[object, asyncio.Future, int]] = []  # (item, its future, its positions)
        self.gathering = False  # a batch of gathered items is running

    def submit(self, *args, positions: int):
        """Queue one run -> a future of what the runner returns. The run goes ahead even if the caller stops
        waiting (a model call cannot be taken back from the thread's queue): await it shielded, and count it
        as running until the future is done. positions: the call's size, for the metrics."""
        return self._queue(self.runner.run, args, positions)

    def _queue(self, run, args: tuple, positions: int, batch: int = 1):
        started = time.perf_counter()
        future = asyncio.get_running_loop().run_in_executor(self.executor, run, *args)

        def ran(done: asyncio.Future) -> None:
            if done.cancelled() or done.exception() is not None:
                return
            self.calls += 1
            if self.metrics:
                self.metrics.model_call(self.stage, batch, positions, time.perf_counter() - started)

        future.add_done_callback(ran)
        return future

    async def gathered_run(self, item, positions: int, max_batch: int = 64):
        """One item of runner.run_batch (items -> a result each): items asked for while a batch runs wait
        and go together as the next one, as an embedding batcher gathers texts. positions: its size."""
        future = asyncio.get_running_loop().create_future()
        self.gathered.append((item, future, positions))
        if not self.gathering:
            self.gathering = True
            asyncio.ensure_future(self._run_gathered(max_batch))
        return await asyncio.shield(future)

    async def _run_gathered(self, max_batch: int) -> None:
        try:
            while self.gathered:
                batch, self.gathered = self.gathered[:max_batch], self.gathered[max_batch:]
                items = [item for item, _, _ in batch]
                running = self._queue(self.runner.run_batch, (items,), sum(p for _, _, p in batch), len(batch))
                try:
                    results = await running
                except Exception as error:  # each caller sees the batch's failure
                    results = [error] * len(batch)
                for (_, future, _), result in zip(batch, results):
                    if future.done():
                        continue
                    if isinstance(result, Exception):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self.gathering = False

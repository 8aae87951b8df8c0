"""Dynamic batching for embeddings: texts from many calls merge into batches bounded by a token budget.

A batch holds at most max_batch_size texts, at most max_batch_tokens tokens counting padding (texts x
longest text), and at most max_attention_pairs query-key pairs (texts x longest text squared: the attention
scores' memory, which grows with a text's square; a text over it runs alone). It starts when it is full, or when its oldest text has waited max_delay. Texts
of similar length go together, to cut padding: around the oldest waiting text, the batch takes whichever
neighbour by length adds the fewest padding tokens, so that the oldest text always runs next and none
starves; then the batch is cut into model calls of similar lengths where that saves more padding than a
call costs (split_by_length). One call's texts may be split across batches.

The model runs in a worker thread, never on the event loop; while it runs, new texts gather for the next
batch. A text whose caller has gone (cancelled, past its deadline) is dropped before it runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

import numpy as np

from modeldir.tokenizer import pad_batch

from ..errors import QueueFull
from ..ops.metrics import ModelMetrics
from .steps import HealthReport

log = logging.getLogger("attnserve.batcher")

# A call of this many padded tokens or more grows the runtime's memory arena well past its idle size.
RELEASE_AFTER_TOKENS = 4096
RELEASE_IDLE_SECONDS = 1.0  # and the memory goes back once no text has come for this long


@dataclass(frozen=True, kw_only=True)
class BatchLimits:
    max_batch_tokens: int
    max_batch_size: int
    max_delay: float  # seconds
    max_queue: int  # texts waiting, over all calls
    split_cost_tokens: int = 64  # what one more model call costs, in padded tokens (see split_by_length)
    # Most texts x longest text ** 2 in a batch (0: no bound): the attention scores' memory, as a budget in
    # query-key pairs (the loader turns bytes into pairs by the model's heads and element size).
    max_attention_pairs: int = 0

    def with_attention_budget(self, budget_bytes: int, n_heads: int, precision: str) -> BatchLimits:
        """These limits with an attention budget of `budget_bytes` (0: none) in query-key pairs, for a model
        of `n_heads` heads in `precision`."""
        if not budget_bytes:
            return self
        element = 2 if precision == "fp16" else 4  # int8 graphs keep their activations in float32
        return dataclasses.replace(self, max_attention_pairs=max(budget_bytes // (n_heads * element), 1))

    def fits(self, count: int, longest: int) -> bool:
        """A batch of `count` texts padded to `longest` tokens keeps both budgets."""
        if count * longest > self.max_batch_tokens:
            return False
        return not self.max_attention_pairs or count * longest * longest <= self.max_attention_pairs


@dataclass
class Item:
    ids: list[int]
    future: asyncio.Future
    extra: tuple[str, ...] = ()  # the model's other outputs its caller wants
    attended: int | None = None  # how many of its first tokens attention admits (None: all)
    enqueued: float = field(default_factory=time.perf_counter)


@dataclass(frozen=True)
class Embedded:
    vector: np.ndarray  # (d,) float32, not normalised
    queue_seconds: float  # from enqueued to its batch's start
    batch_seconds: float  # the model time of its batch
    batch_id: int
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # its row of each output asked for, padded


def take_batch(waiting: list[Item], limits: BatchLimits) -> list[Item]:
    """The waiting items to run next: the oldest (waiting[0]) and its neighbours by length."""
    by_length = sorted(range(len(waiting)), key=lambda i: (len(waiting[i].ids), i))
    anchor = by_length.index(0)
    low, high = anchor, anchor  # inclusive window in by_length
    longest = len(waiting[0].ids)
    while high - low + 1 < limits.max_batch_size:
        count = high - low + 1
        options = []
        if low > 0:  # a shorter text: its own padding up to `longest`
            length = len(waiting[by_length[low - 1]].ids)
            if limits.fits(count + 1, longest):
                options.append((longest - length, "low"))
        if high + 1 < len(by_length):  # a longer text: every text so far pads up to it
            length = len(waiting[by_length[high + 1]].ids)
            if limits.fits(count + 1, length):
                options.append((count * (length - longest), "high"))
        if not options:
            break
        _, side = min(options)
        if side == "low":
            low -= 1
        else:
            high += 1
            longest = len(waiting[by_length[high]].ids)
    return [waiting[i] for i in by_length[low : high + 1]]


def split_by_length(batch: list, call_cost_tokens: int, length=lambda item: len(item.ids)) -> list[list]:
    """The batch, sorted by length, cut into runs of similar length where that saves more padded tokens
    than the extra model calls cost: minimises sum over groups of (call_cost_tokens + texts x longest).

    A batch of mixed lengths pads every text to the longest; on a CPU, padding costs nearly as much as
    real tokens while one more call costs little (measured: 16 batches of 32 random lengths took 2.03 s
    whole and 1.37 s cut this way, with call_cost_tokens 32 to 64)."""
    items = sorted(batch, key=length)
    lengths = [length(item) for item in items]
    best = [0] * (len(items) + 1)  # best[j]: the least cost of the first j items
    cut = [0] * (len(items) + 1)
    for j in range(1, len(items) + 1):
        best[j], cut[j] = min((best[i] + call_cost_tokens + (j - i) * lengths[j - 1], i) for i in range(j))
    groups = []
    j = len(items)
    while j:
        groups.append(items[cut[j] : j])
        j = cut[j]
    return groups[::-1]


class EmbeddingBatcher:
    def __init__(
        self,
        embed: Callable[[np.ndarray, np.ndarray, tuple[str, ...], object], tuple[np.ndarray, ...]],
        pad_id: int,
        limits: BatchLimits,
        executor: Executor,
        *,
        name: str = "",
        metrics: ModelMetrics | None = None,
        make_run_options: Callable[[], object] | None = None,
        health: HealthReport | None = None,
        release_memory: Callable[[], None] | None = None,
    ):
        """embed(input_ids, attention_mask, extra outputs, run_options) -> ((B, d), *extra outputs), run in
        `executor`, each batch asking for the extra outputs any of its texts wants. metrics hears of
        each model call and each text's time in the queue. make_run_options makes the per-call options
        object whose `terminate` is set when every caller of a running call has gone. release_memory,
        run in `executor` when the queue has been empty for RELEASE_IDLE_SECONDS after a call of
        RELEASE_AFTER_TOKENS padded tokens or more, gives the runtime's memory back."""
        self.embed, self.pad_id, self.limits, self.executor, self.name = embed, pad_id, limits, executor, name
        self.metrics, self.make_run_options, self.health = metrics, make_run_options, health
        self.release_memory = release_memory
        self._largest_call = 0  # padded tokens of the largest call since memory was last released
        self.memory_releases = 0
        self.waiting: list[Item] = []
        self.running: list[Item] = []
        self._running_group: list[Item] = []  # the texts of the model call in flight
        self._running_options = None  # of the model call in flight: stop() terminates it
        self._arrived = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.batches_run = 0
        self.texts_run = 0

    @property
    def queue_depth(self) -> int:
        return len(self.waiting)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"batcher:{self.name}")

    async def stop(self, error: Exception) -> None:
        """Stop the loop; texts still waiting or running get `error`."""
        leftover = self.waiting + self.running  # cancelling the loop clears `running`
        if self._running_options is not None:
            self._running_options.terminate = True
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for item in leftover:
            if not item.future.done():
                item.future.set_exception(error)
        self.waiting.clear()

    async def submit(
        self, sequences: list[list[int]], extra: tuple[str, ...] = (), attended: list[int | None] | None = None
    ) -> list[Embedded]:
        """Embed token sequences (and give the extra outputs named; attended: how many of each one's first
        tokens attention admits, None all); raises QueueFull at once if they do not fit in the queue. If the
        caller is cancelled while waiting, its texts leave the queue (or are ignored if running)."""
        if len(self.waiting) + len(sequences) > self.limits.max_queue:
            raise QueueFull(f"{len(self.waiting)} texts are waiting; the queue holds {self.limits.max_queue}")
        loop = asyncio.get_running_loop()
        attended = attended or [None] * len(sequences)
        items = [Item(ids, loop.create_future(), extra, admitted) for ids, admitted in zip(sequences, attended)]
        self.waiting.extend(items)
        self._arrived.set()
        try:
            if len(items) == 1:  # most calls: no gathering future and its callbacks
                return [await items[0].future]
            return list(await asyncio.gather(*(item.future for item in items)))
        except BaseException:
            # Cancelled or failed: nothing of this call may stay behind in the queue. (A cancelled gather
            # has already cancelled the futures; a running batch skips cancelled ones when it ends.)
            mine = {id(item) for item in items}
            self.waiting = [item for item in self.waiting if id(item) not in mine]
            for item in items:
                item.future.cancel()
            self._stop_if_all_gone()
            raise

    def _stop_if_all_gone(self) -> None:
        """Every caller of the running model call has gone: stop it (RunOptions.terminate)."""
        options = self._running_options
        if options is not None and all(item.future.done() for item in self._running_group):
            options.terminate = True

    def _full(self) -> bool:
        if len(self.waiting) >= self.limits.max_batch_size:
            return True
        longest = max(len(item.ids) for item in self.waiting)
        count = len(self.waiting)
        # Full: at the token budget, or one more text as long would pass the attention budget.
        return count * longest >= self.limits.max_batch_tokens or not self.limits.fits(count + 1, longest)

    async def _loop(self) -> None:
        while True:
            if not self.waiting:
                self._arrived.clear()
                if self.holds_memory():
                    try:  # a pause in a burst keeps the memory; an idle spell gives it back
                        await asyncio.wait_for(self._arrived.wait(), RELEASE_IDLE_SECONDS)
                    except asyncio.TimeoutError:
                        await self._release_memory()
                    continue
                await self._arrived.wait()
                continue
            # Wait for the batch to fill, at most until the oldest text has waited max_delay.
            wait = self.waiting[0].enqueued + self.limits.max_delay - time.perf_counter()
            if wait > 0 and not self._full():
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), wait)
                except asyncio.TimeoutError:
                    pass
                continue
            batch = take_batch(self.waiting, self.limits)
            taken = {id(item) for item in batch}
            self.waiting = [item for item in self.waiting if id(item) not in taken]
            await self._run(batch)

    def holds_memory(self) -> bool:
        """Whether a large call since the last release left the runtime's arena grown."""
        return self.release_memory is not None and self._largest_call >= RELEASE_AFTER_TOKENS

    async def _release_memory(self) -> None:
        """Idle after large calls: the runtime keeps its peak memory until told (measured in
        docs/benchmarks.md: 238 MB -> 616 MB after a burst of 32 long texts a call, for good)."""
        self._largest_call = 0
        self.memory_releases += 1
        try:
            await asyncio.get_running_loop().run_in_executor(self.executor, self.release_memory)
        except Exception:
            log.exception("model %s: releasing memory failed", self.name)

    async def _run(self, batch: list[Item]) -> None:
        batch = [item for item in batch if not item.future.done()]  # callers gone: not run
        self.running = batch
        try:
            for group in split_by_length(batch, self.limits.split_cost_tokens):
                await self._run_group(group)
        finally:
            self.running = []

    async def _run_group(self, group: list[Item]) -> None:
        options = self.make_run_options() if self.make_run_options else None
        self._running_group, self._running_options = group, options
        try:
            outcome = await asyncio.get_running_loop().run_in_executor(
                self.executor, self._embed_wanted, group, options
            )
        except Exception as error:  # the model failed: this group's callers learn it, the loop goes on
            if not all(item.future.done() for item in group):  # else: stopped because all callers left
                log.exception("model %s: batch of %d texts failed", self.name, len(group))
                if self.health:
                    self.health.failed()
            for item in group:
                if not item.future.done():
                    item.future.set_exception(error)
            return
        finally:
            self._running_group, self._running_options = [], None
        if outcome is None:
            return
        if self.health:
            self.health.succeeded()
        wanted, names, outputs, padded_tokens, started, seconds, number = outcome
        self._largest_call = max(self._largest_call, padded_tokens)
        if self.metrics:
            self.metrics.model_call("embed", len(wanted), padded_tokens, seconds)
            self.metrics.queued_all(started - np.fromiter((item.enqueued for item in wanted), np.float64, len(wanted)))
        vectors, extra = outputs[0], dict(zip(names, outputs[1:]))
        for row, item in enumerate(wanted):
            if not item.future.done():
                rows = {name: extra[name][row] for name in item.extra}
                item.future.set_result(Embedded(vectors[row], started - item.enqueued, seconds, number, rows))

    @staticmethod
    def _extra_of(batch: list[Item]) -> tuple[str, ...]:
        """The extra outputs any text of the batch wants, in a fixed order."""
        return tuple(sorted({name for item in batch for name in item.extra}))

    def _embed_wanted(self, batch: list[Item], options):
        """In the model thread, when the batch's turn has come: only texts whose callers still wait run."""
        wanted = [item for item in batch if not item.future.done()]
        if not wanted:
            return None
        ids, mask = pad_batch([item.ids for item in wanted], self.pad_id, [item.attended for item in wanted])
        names = self._extra_of(wanted)
        started = time.perf_counter()
        outputs = self.embed(ids, mask, names, options)
        self.batches_run += 1
        self.texts_run += len(wanted)
        return wanted, names, outputs, int(ids.size), started, time.perf_counter() - started, self.batches_run

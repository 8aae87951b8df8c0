"""Continuous batching for generation: admission, the step loop, finishing. The only writer of sequence
state.

Each turn of the loop: sequences whose callers have gone leave (their cache rows are freed); waiting
requests are admitted while the cache has rows, and their sources go through the encoder together; then
one decoder step runs for every running sequence at once, new ones included, and each sequence's next
token is chosen. Tokens become text (held back where a stop sequence might begin), events go to the
callers, and finished sequences leave at once. Model work and sampling run in the model thread.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from dataclasses import dataclass, field

import numpy as np

from .kv_cache import KVCache
from .metrics import ModelMetrics
from .runner import Seq2SeqRunner
from .sampling import SamplingParams, next_token
from .text_stream import TextStream
from .tokenizer import pad_batch

log = logging.getLogger("attnserve.scheduler")

LENGTH, EOS, STOP, CANCELLED = "length", "eos", "stop", "cancelled"


class QueueFull(Exception):
    """Too many requests are waiting for a cache row."""


@dataclass(frozen=True)
class GenerationParams:
    max_new_tokens: int
    sampling: SamplingParams = SamplingParams()
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    generated_tokens: int
    queue_seconds: float  # from arrival to admission
    time_to_first_token: float  # from arrival to the first token


@dataclass(frozen=True)
class Event:
    """New text and token ids of one sequence; the last event has finish_reason and usage."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    usage: Usage | None = None


@dataclass(eq=False)
class Sequence:
    prompt: list[int]
    params: GenerationParams
    text: TextStream
    rng: np.random.Generator
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    arrived: float = field(default_factory=time.perf_counter)
    admitted: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    row: int | None = None
    generated: list[int] = field(default_factory=list)
    unsent: list[int] = field(default_factory=list)  # ids not yet in an event
    gone: bool = False  # the caller left

    def finish(self, reason: str, last_text: str = "") -> None:
        now = time.perf_counter()
        usage = Usage(
            prompt_tokens=len(self.prompt),
            generated_tokens=len(self.generated),
            queue_seconds=(self.admitted or now) - self.arrived,
            time_to_first_token=(self.first_token or now) - self.arrived,
        )
        self.events.put_nowait(Event(last_text, self.unsent, reason, usage))
        self.unsent = []


class Scheduler:
    def __init__(
        self,
        runner: Seq2SeqRunner,
        cache: KVCache,
        tokenizer,
        bos_id: int,
        eos_id: int,
        pad_id: int,
        executor: Executor,
        max_waiting: int,
        name: str = "",
        metrics: ModelMetrics | None = None,
        health=None,
    ):
        self.runner, self.cache, self.tokenizer, self.executor = runner, cache, tokenizer, executor
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        self.max_waiting, self.name, self.metrics, self.health = max_waiting, name, metrics, health
        self.waiting: deque[Sequence] = deque()
        self.rows: list[Sequence] = []  # rows[i] is the sequence in cache row i
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.steps_run = 0
        self.largest_step = 0  # the most sequences one step has run

    @property
    def running(self) -> int:
        return len(self.rows)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"scheduler:{self.name}")

    async def stop(self, error: Exception) -> None:
        """Stop the loop; callers still waiting or running get `error`."""
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for sequence in list(self.waiting) + self.rows:
            sequence.events.put_nowait(error)
        self.waiting.clear()
        while self.rows:
            self._leave(self.rows[-1])

    async def generate(self, prompt: list[int], params: GenerationParams) -> AsyncIterator[Event]:
        """Events of one sequence until it finishes. Leaving early (the caller cancelled) frees its row
        before the next step."""
        if len(self.waiting) >= self.max_waiting:
            raise QueueFull(f"{len(self.waiting)} requests are waiting; the queue holds {self.max_waiting}")
        seed = params.seed if params.seed is not None else secrets.randbits(64)
        sequence = Sequence(prompt, params, TextStream(self.tokenizer.decode, params.stop), np.random.default_rng(seed))
        self.waiting.append(sequence)
        self._wake.set()
        try:
            while True:
                event = await sequence.events.get()
                if isinstance(event, Exception):
                    raise event
                yield event
                if event.finish_reason is not None:
                    return
        finally:
            sequence.gone = True
            if sequence in self.waiting:
                self.waiting.remove(sequence)
            self._wake.set()

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            for sequence in [s for s in self.rows if s.gone]:
                self._leave(sequence)
            if not self.rows and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                continue
            admitted = self._admit()
            if not self.rows:
                continue
            try:
                tokens, timings = await loop.run_in_executor(self.executor, self._model_turn, admitted, list(self.rows))
            except Exception as error:  # a model fault: these sequences fail, the loop goes on
                log.exception("model %s: decode step failed", self.name)
                if self.health:
                    self.health.failed()
                for sequence in list(self.rows):
                    sequence.events.put_nowait(error)
                    self._leave(sequence)
                continue
            if self.health:
                self.health.succeeded()
            self.steps_run += 1
            self.largest_step = max(self.largest_step, len(tokens))
            if self.metrics:
                for stage, inputs, positions, seconds in timings:
                    self.metrics.model_call(stage, inputs, positions, seconds)
            self._advance(tokens)

    def _admit(self) -> list[Sequence]:
        admitted = []
        while self.waiting and self.cache.free_rows:
            sequence = self.waiting.popleft()
            sequence.row = self.cache.allocate(len(sequence.prompt), sequence.params.max_new_tokens)
            sequence.admitted = time.perf_counter()
            if self.metrics:
                self.metrics.queued(sequence.admitted - sequence.arrived)
            self.rows.append(sequence)
            admitted.append(sequence)
        return admitted

    def _model_turn(self, admitted: list[Sequence], rows: list[Sequence]) -> tuple[list[int], list[tuple]]:
        """In the model thread: encode the newly admitted sources, one decoder step for all rows, choose
        each row's next token. -> the tokens, and (stage, inputs, positions, seconds) of each model call."""
        timings = []
        if admitted:
            started = time.perf_counter()
            ids, mask = pad_batch([s.prompt for s in admitted], self.pad_id)
            cross = self.runner.encode(ids, mask)
            for i, sequence in enumerate(admitted):
                self.cache.write_cross(sequence.row, [c[i] for c in cross[0::2]], [c[i] for c in cross[1::2]])
            timings.append(("encode", len(admitted), int(ids.size), time.perf_counter() - started))
        started = time.perf_counter()
        last = [s.generated[-1] if s.generated else self.bos_id for s in rows]
        inputs = self.cache.step_inputs()
        logits = self.runner.step(
            np.array(last, dtype=np.int64)[:, None],
            inputs["past_lengths"],
            inputs["encoder_attention_mask"],
            inputs["self"],
            inputs["cross"],
        )
        tokens = [next_token(logits[i], s.generated, s.params.sampling, s.rng) for i, s in enumerate(rows)]
        timings.append(("decode", len(rows), len(rows), time.perf_counter() - started))
        return tokens, timings

    def _advance(self, tokens: list[int]) -> None:
        # The step filled one more position of every row: count it before any row moves.
        self.cache.lengths[: len(tokens)] += 1
        now = time.perf_counter()
        for sequence, token in zip(list(self.rows), tokens):
            if sequence.gone:
                continue  # leaves at the start of the next turn
            if self.metrics:
                if sequence.first_token is None:
                    self.metrics.first_token(now - sequence.arrived)
                else:
                    self.metrics.between_tokens(now - sequence.last_token)
            if sequence.first_token is None:
                sequence.first_token = now
            sequence.last_token = now
            if token == self.eos_id and not sequence.params.ignore_eos:
                sequence.finish(EOS, sequence.text.update(sequence.generated, final=True))
                self._leave(sequence)
                continue
            sequence.generated.append(token)
            sequence.unsent.append(token)
            if self.metrics:
                self.metrics.generated(1)
            at_limit = len(sequence.generated) >= sequence.params.max_new_tokens
            text = sequence.text.update(sequence.generated, final=at_limit)
            if sequence.text.stopped:
                sequence.finish(STOP, text)
                self._leave(sequence)
            elif at_limit:
                sequence.finish(LENGTH, text)
                self._leave(sequence)
            else:
                sequence.events.put_nowait(Event(text, sequence.unsent))
                sequence.unsent = []

    def _leave(self, sequence: Sequence) -> None:
        """Free the sequence's row; the last row's sequence moves into it."""
        moved = self.cache.free(sequence.row)
        last = self.rows.pop()
        if moved is not None:
            self.rows[sequence.row] = last
            last.row = sequence.row
        sequence.row = None

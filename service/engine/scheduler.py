"""Continuous batching for generation: one loop per seq2seq model, the only writer of sequence state. Each
turn of the loop has three parts:
- schedule: sequences whose callers have gone leave (the cache frees their rows); waiting requests are
  admitted while the cache has room for them (a beam search takes one row per beam, all at once);
- execute, in the model thread: the sources admitted this turn go through the encoder together, then
  one decoder step runs for every running row at once, and each row's next token is chosen
  (token_choice.py); beam searches step, and their rows follow their parents (the cache moves them).
  A failed model call fails the step's sequences; a sequence whose own rules or host sampling raise fails
  alone (the sampling graph draws every row at once: its failure is the step's);
- update, on the event loop: tokens become text (held back where a stop sequence might begin), events
  go to the callers, and finished sequences leave at once.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor

import numpy as np

from ..errors import QueueFull
from ..ops.metrics import ModelMetrics
from .batcher import RELEASE_AFTER_TOKENS, RELEASE_IDLE_SECONDS
from .generation_cache import GenerationCache
from .patient_beam_search import beam_search
from .rows import BEAM, RowState
from .sequence import EOS, LENGTH, STOP, BeamRow, Event, GenerationParams, Sequence, owner
from .source_encoding import encode_sources
from .steps import HealthReport, ModelCall, SchedulerSettings, StepPlan, StepResult
from .text_stream import NO_TEXT, Detokenizer, TextStream
from .token_choice import TokenChoice
from .token_counts import count_tokens

log = logging.getLogger("attnserve.scheduler")


class Scheduler:
    def __init__(
        self,
        settings: SchedulerSettings,
        runner,
        cache: GenerationCache,
        detokenizer: Detokenizer,
        choice: TokenChoice,
        *,
        executor: Executor,
        metrics: ModelMetrics | None = None,
        health: HealthReport | None = None,
        release_memory: Callable[[], None] | None = None,
        buckets=None,
    ):
        """runner: encode(ids, mask) -> EncoderOutput, and step(...) -> StepOutput (runner/seq2seq.py);
        detokenizer: the model's tokenizer, token ids -> text (text_stream.py); release_memory: gives the
        runtime's memory back, run when idle after large encoder calls (as the batcher does: batcher.py);
        buckets: where greedy steps run when CUDA graphs are on (runner/decode_buckets.py)."""
        self.settings, self.buckets = settings, buckets
        self.runner, self.cache, self.choice, self.executor = runner, cache, choice, executor
        self.detokenizer, self.decode, self.release_memory = detokenizer, detokenizer.decode, release_memory
        self.bos_id, self.pad_id, self.eos_id = settings.bos_id, settings.pad_id, choice.eos_id
        self.max_waiting, self.name, self.metrics, self.health = settings.max_waiting, settings.name, metrics, health
        self._largest_call = 0  # padded tokens of the largest encoder call since memory was last released
        self.rows = RowState(cache, self.bos_id, choice.rules.forced_eos)
        self.waiting: deque[Sequence] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.steps_run = 0
        self.largest_step = 0  # the most rows one step has run

    @property
    def running(self) -> int:
        """Running sequences (a beam search counts once)."""
        return len(self._sequences())

    def _sequences(self) -> list[Sequence]:
        """The running sequences, each once, in row order."""
        return list({id(owner(holder)): owner(holder) for holder in self.cache.holders}.values())

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
            except Exception:  # the loop died of its own fault: its callers still get `error` below
                log.exception("model %s: the scheduling loop had failed", self.name)
        for sequence in list(self.waiting) + self._sequences():
            sequence.fail(error)
        self.waiting.clear()
        for sequence in self._sequences():
            self._leave(sequence)

    async def generate(
        self, prompt: list[int], params: GenerationParams, features: np.ndarray | None = None
    ) -> AsyncIterator[Event]:
        """Events of one sequence until it finishes, each with everything since the one before (the caller
        may be behind); QueueFull when the queue is full. Leaving early (the caller cancelled) frees its
        rows before the next step. features: an audio window's log-mel frames (n_mels, frames), the
        source of an audio encoder's model, where prompt is empty."""
        if len(self.waiting) >= self.max_waiting:
            raise QueueFull(f"{len(self.waiting)} requests are waiting; the queue holds {self.max_waiting}")
        seed = params.seed if params.seed is not None else secrets.randbits(64)
        source = self.detokenizer if params.text else NO_TEXT  # without text: an API process decodes the ids
        text = TextStream(source.stream_decoder(), params.stop, source.decode)
        sequence = Sequence(prompt, params, text, np.random.default_rng(seed), features)
        # The core's limits did already.
        self.cache.refuse_unless_fits(sequence.source_length, params.max_steps, self.name)
        if params.beams:
            sequence.search = beam_search(params, self.eos_id)
        self.waiting.append(sequence)
        self._wake.set()
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not sequence.has_news:
                    sequence.waiter = loop.create_future()
                    await sequence.waiter
                    sequence.waiter = None
                event = sequence.take()
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
            for sequence in [s for s in self._sequences() if s.gone]:
                self._leave(sequence)
            if not self.cache.holders and not self.waiting:
                self._wake.clear()
                if self.release_memory is not None and self._largest_call >= RELEASE_AFTER_TOKENS:
                    try:  # a pause keeps the memory; an idle spell gives it back
                        await asyncio.wait_for(self._wake.wait(), RELEASE_IDLE_SECONDS)
                    except asyncio.TimeoutError:
                        await self._release_memory()
                    continue
                await self._wake.wait()
                continue
            plan = self._schedule()
            if not plan.holders:
                continue
            try:
                result = await loop.run_in_executor(self.executor, self._execute, plan)
            except Exception as error:  # a model fault: these sequences fail, the loop goes on
                log.exception("model %s: decode step failed", self.name)
                if self.health:
                    self.health.failed()
                for sequence in self._sequences():
                    sequence.fail(error)
                    self._leave(sequence)
                continue
            if self.health:
                self.health.succeeded()
            self.steps_run += 1
            self.largest_step = max(self.largest_step, plan.rows)
            for call in result.calls:
                if call.stage == "encode":
                    self._largest_call = max(self._largest_call, call.positions)
                if self.metrics:
                    self.metrics.model_call(call.stage, call.inputs, call.positions, call.seconds)
                    self.metrics.transferred(call.stage, call.sent, call.fetched)
            if self.metrics and getattr(plan.holders[0], "sequence", plan.holders[0]).features is not None:
                # A speech model's: each sequence decodes one window (a beam search, or one of its samples).
                self.metrics.windows_in_step(len({id(getattr(h, "sequence", h)) for h in plan.holders}))
            self._update(plan, result)

    async def _release_memory(self) -> None:
        self._largest_call = 0
        try:
            await asyncio.get_running_loop().run_in_executor(self.executor, self.release_memory)
        except Exception:
            log.exception("model %s: releasing memory failed", self.name)

    # schedule

    def _schedule(self) -> StepPlan:
        """Admit waiting sequences, first come first served, while the cache has room for them (a beam search
        at the head waits for all its rows); -> the turn's plan over every row."""
        admitted = []
        while self.waiting and self.cache.admits(*self.waiting[0].cache_need):
            sequence = self.waiting.popleft()
            if sequence.search:
                sequence.beam_rows = [BeamRow(sequence, beam) for beam in range(sequence.params.width)]
            try:
                self.cache.allocate_all(sequence.holders, sequence.source_length, sequence.params.max_steps)
            except Exception as error:  # a re-layout failed on the device (logged): this request fails, not the rest
                sequence.fail(error)
                continue
            for holder in sequence.holders:
                self.rows.admit(holder)
            sequence.admitted = time.perf_counter()
            if self.metrics and not sequence.params.probe:
                self.metrics.queued(sequence.admitted - sequence.arrived)
            admitted.append(sequence)
        return StepPlan(admitted, list(self.cache.holders))

    def _leave(self, sequence: Sequence) -> None:
        for holder in sequence.holders:
            self.rows.leave(holder)
            self.cache.release(holder)

    # execute (in the model thread)

    def _execute(self, plan: StepPlan) -> StepResult:
        """Encode the newly admitted sources (their cross K/V go into their rows on the device), run one
        decoder step for all rows, choose each row's next token (beam searches: their beams', rows
        reordered)."""
        calls = encode_sources(self.runner, self.cache, plan.admitted, self.settings)
        started = time.perf_counter()
        rows, holders, cache, state = plan.rows, plan.holders, self.cache, self.rows
        last = state.next_input[:rows].reshape(rows, 1)
        logit_rows = self.choice.logit_rows(state, rows)
        on_device = self.choice.samples_on_device(state, holders, logit_rows)
        lengths, layout = cache.lengths[:rows], cache.cross_layout(rows)
        if self.buckets is not None:  # greedy steps in a bucket, the others eager
            step = self.buckets.step_rows(last, lengths, layout, logit_rows, rows, logits_on_device=on_device)
        else:
            step = self.runner.step(last, lengths, layout, logit_rows, cache.memory, rows, logits_on_device=on_device)
        cache.advance(rows)
        failures: dict[int, Exception] = {}  # by row: a sequence whose own rules or sampling raise fails alone
        tokens = self.choice.choose(step, state, holders, failures)
        for sequence in {id(h.sequence): h.sequence for h in holders if isinstance(h, BeamRow)}.values():
            try:
                parents = self.choice.beam_step(sequence, step)
            except Exception as error:
                failures.update((beam.row, error) for beam in sequence.beam_rows)
                continue
            if parents is not None:
                sequence.beam_rows = cache.follow_parents(sequence.beam_rows, parents)
                for beam, holder in enumerate(sequence.beam_rows):
                    holder.beam = beam
                state.follow_beams(sequence)
        calls.append(ModelCall("decode", rows, rows, time.perf_counter() - started, step.sent, step.fetched))
        return StepResult(tokens, calls, failures)

    # update

    def _update(self, plan: StepPlan, result: StepResult) -> None:
        """The step's tokens into every row's books at once; Python work only for the rows that finish,
        stream or follow stop sequences, and once per sequence for its first token. A forced token (a
        target language's code) goes into the books only: no news, not timed, not counted."""
        now = time.perf_counter()
        count, holders, state, tokens = plan.rows, plan.holders, self.rows, result.tokens
        for i, error in result.failures.items():
            sequence = owner(holders[i])
            if not sequence.gone:  # a caller that left, or a search whose first beam failed it already
                log.error("model %s: a sequence's token choice failed; it fails alone", self.name, exc_info=error)
                sequence.fail(error)
                sequence.gone = True  # it leaves at the start of the next turn, as a caller that left does
        chosen = None if state.beams == 0 else state.kind[:count] != BEAM  # None: every row
        if result.failures:  # their sequences failed: nothing of theirs goes into the books or the metrics
            failed = np.zeros(count, np.bool_)
            failed[list(result.failures)] = True
            chosen = ~failed if chosen is None else chosen & ~failed
        forced = state.forced_now(count)  # before the counts grow
        ended = tokens == self.eos_id  # never a beam row's: its token is BEAM_ROW
        if state.ignoring_eos:
            ended &= state.eos_ends[:count]
        grown = (~ended if chosen is None else chosen & ~ended).nonzero()[0]
        state.tokens[grown, state.count[grown]] = tokens[grown]
        state.count[grown] += 1
        state.next_input[grown] = tokens[grown]
        at_limit = np.zeros(count, np.bool_)
        at_limit[grown] = state.count[grown] >= state.max_steps[grown]
        news = ended | at_limit
        news[grown] |= state.per_token[grown]
        if forced is None:
            count_tokens(state, self.metrics, holders, chosen, grown, now)
        else:
            state.forcing -= state.forcing_ends(forced)
            news &= ~forced
            count_tokens(
                state,
                self.metrics,
                holders,
                ~forced if chosen is None else chosen & ~forced,
                grown[~forced[grown]],
                now,
            )
        for i in news.nonzero()[0].tolist():
            sequence = holders[i]
            if not sequence.gone:  # gone: leaves at the start of the next turn
                self._news(sequence, int(tokens[i]), bool(ended[i]), bool(at_limit[i]))
        if state.beams:
            searches = {id(owner(h)): owner(h) for h in holders if isinstance(h, BeamRow)}
            for sequence in searches.values():
                if sequence.search.done and not sequence.gone:
                    self._finish_search(sequence, now)

    def _news(self, sequence: Sequence, token: int, ended: bool, at_limit: bool) -> None:
        """A row whose sequence ends (eos, or its last token) or follows its text token by token. (Its
        row now: the rows of sequences that ended before it in this loop have been given to others.)"""
        state, row = self.rows, sequence.row
        per_token = sequence.params.events_per_token
        if ended or at_limit:
            sequence.generated = state.reported(row)
        if not per_token:  # the text is decoded once, at the end
            sequence.unsent = list(sequence.generated)
        if ended:
            forced = bool(state.forced_eos[row]) and int(state.count[row]) == int(state.max_steps[row]) - 1
            last_text = sequence.text.end() if per_token else sequence.text.decode(sequence.generated)
            reason = STOP if sequence.text.stopped else LENGTH if forced else EOS
            sequence.finish(reason, last_text, **state.scores(row))
            self._leave(sequence)
            return
        if not per_token:
            sequence.finish(LENGTH, sequence.text.decode(sequence.generated), **state.scores(row))
            self._leave(sequence)
            return
        sequence.unsent.append(token)
        text = sequence.text.update(token)
        if at_limit and not sequence.text.stopped:
            text += sequence.text.end()
        if sequence.text.stopped or at_limit:
            if not at_limit:
                sequence.generated = state.reported(row)
            sequence.finish(STOP if sequence.text.stopped else LENGTH, text, **state.scores(row))
            self._leave(sequence)
        else:
            sequence.send(text)

    def _finish_search(self, sequence: Sequence, now: float) -> None:
        """A beam search ends with one event: the best hypothesis, whole, and the n best."""
        hypotheses = self.choice.hypotheses(sequence, self.decode)
        best = hypotheses[0]
        sequence.generated = best.token_ids
        sequence.unsent = list(best.token_ids)
        sequence.first_token = now
        if self.metrics and not sequence.params.probe:
            self.metrics.first_token(now - sequence.arrived)
            self.metrics.generated(len(best.token_ids))
        sequence.finish(best.finish_reason, best.text, hypotheses)
        self._leave(sequence)

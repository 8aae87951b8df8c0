"""Continuous batching for generation: admission, the step loop, finishing. The only writer of sequence
state.

Each turn of the loop: sequences whose callers have gone leave (their cache rows are freed); waiting
requests are admitted while the cache has rows, and their sources go through the encoder together; then
one decoder step runs for every running sequence at once, new ones included, and each sequence's next
token is chosen. Tokens become text (held back where a stop sequence might begin), events go to the
callers, and finished sequences leave at once. Model work and sampling run in the model thread.

A beam-search sequence holds one row per beam. After each step its beams' rows follow their parents:
a parent's first child keeps the parent's row as it is, and only further children are copied (the
filled positions of one row) into the rows of beams that died. Cross-attention rows are the same for
all beams of a sequence and never move.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from dataclasses import dataclass, field

import numpy as np

from .batcher import split_by_length
from .beam_search import BeamSearch, BeamSettings, log_softmax
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
    beams: BeamSettings | None = None  # beam search (num_beams >= 2); None: greedy or sampling
    # Events token by token (GenerateStream); otherwise one at the end, and the text is decoded once
    # (each step's decode, and waking the caller, would take the cores the model needs).
    stream: bool = True

    @property
    def events_per_token(self) -> bool:
        """Whether the text is followed token by token: to stream it, or to find stop sequences in it."""
        return self.stream or bool(self.stop)

    @property
    def greedy(self) -> bool:
        """The plain argmax: no temperature, no repetition penalty."""
        return self.sampling.temperature == 0.0 and self.sampling.repetition_penalty == 1.0

    @property
    def width(self) -> int:
        """Cache rows the sequence takes."""
        return self.beams.num_beams if self.beams else 1


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    generated_tokens: int
    queue_seconds: float  # from arrival to admission
    time_to_first_token: float  # from arrival to the first token


@dataclass(frozen=True)
class Hypothesis:
    """One of a beam search's best finished hypotheses."""

    text: str
    token_ids: list[int]  # without the eos token
    finish_reason: str
    score: float  # what it was ranked by: sum(log p) / generated_length ** length_penalty


@dataclass(frozen=True)
class Event:
    """New text and token ids of one sequence; the last event has finish_reason and usage (and, for a
    beam search, its n best hypotheses, the first being text and token_ids)."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    usage: Usage | None = None
    hypotheses: tuple[Hypothesis, ...] = ()


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
    row: int | None = None  # greedy and sampled sequences
    beam_rows: list[BeamRow] = field(default_factory=list)  # beam search: the beams' rows, in beam order
    search: BeamSearch | None = None
    generated: list[int] = field(default_factory=list)
    unsent: list[int] = field(default_factory=list)  # ids not yet in an event
    gone: bool = False  # the caller left

    @property
    def slots(self) -> list:
        """What the sequence holds in the scheduler's rows."""
        return self.beam_rows if self.search else [self]

    def finish(self, reason: str, last_text: str = "", hypotheses: tuple[Hypothesis, ...] = ()) -> None:
        now = time.perf_counter()
        usage = Usage(
            prompt_tokens=len(self.prompt),
            generated_tokens=len(self.generated),
            queue_seconds=(self.admitted or now) - self.arrived,
            time_to_first_token=(self.first_token or now) - self.arrived,
        )
        self.events.put_nowait(Event(last_text, self.unsent, reason, usage, hypotheses))
        self.unsent = []


@dataclass(eq=False)
class BeamRow:
    """One beam's cache row; `beam` is its place among the sequence's running beams."""

    sequence: Sequence
    beam: int
    row: int | None = None


def owner(slot: Sequence | BeamRow) -> Sequence:
    return slot.sequence if isinstance(slot, BeamRow) else slot


def reorder_beams(beam_rows: list[BeamRow], parents: list[int]) -> tuple[list[BeamRow], list[tuple[int, int]]]:
    """Rows for the new beams, whose parents are `parents` (old beam indices). -> the rows in new beam
    order, and the (from row, to row) copies that make it so: a parent's first child keeps its row;
    each further child takes the row of a beam that has no child, with a copy of its parent's."""
    children = defaultdict(list)
    for new, parent in enumerate(parents):
        children[parent].append(new)
    spare = [slot for old, slot in enumerate(beam_rows) if old not in children]
    ordered: list[BeamRow | None] = [None] * len(parents)
    copies = []
    for parent, kids in children.items():
        ordered[kids[0]] = beam_rows[parent]
        for kid in kids[1:]:
            slot = spare.pop()
            copies.append((beam_rows[parent].row, slot.row))
            ordered[kid] = slot
    for beam, slot in enumerate(ordered):
        slot.beam = beam
    return ordered, copies


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
        suppressed_ids: tuple[int, ...] = (),
        forced_eos: bool = False,
        renormalize_logits: bool = False,
        encode_split_cost: int = 64,
    ):
        self.runner, self.cache, self.tokenizer, self.executor = runner, cache, tokenizer, executor
        # The checkpoint's generation rules (transformers' bad_words_ids, forced_eos_token_id).
        self.suppressed_ids = np.asarray(suppressed_ids, dtype=np.int64)
        self.forced_eos, self.renormalize_logits = forced_eos, renormalize_logits
        self.encode_split_cost = encode_split_cost  # one more encoder call's cost in padded tokens
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        self.max_waiting, self.name, self.metrics, self.health = max_waiting, name, metrics, health
        self.waiting: deque[Sequence] = deque()
        self.rows: list[Sequence | BeamRow] = []  # rows[i]: what holds cache row i
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.steps_run = 0
        self.largest_step = 0  # the most sequences one step has run

    @property
    def running(self) -> int:
        """Running sequences (a beam search counts once)."""
        return len({id(owner(slot)) for slot in self.rows})

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
        for sequence in list(self.waiting) + self._sequences():
            sequence.events.put_nowait(error)
        self.waiting.clear()
        while self.rows:
            self._leave(owner(self.rows[-1]))

    def _sequences(self) -> list[Sequence]:
        """The running sequences, each once, in row order."""
        return list({id(owner(slot)): owner(slot) for slot in self.rows}.values())

    async def generate(self, prompt: list[int], params: GenerationParams) -> AsyncIterator[Event]:
        """Events of one sequence until it finishes. Leaving early (the caller cancelled) frees its row
        before the next step."""
        if len(self.waiting) >= self.max_waiting:
            raise QueueFull(f"{len(self.waiting)} requests are waiting; the queue holds {self.max_waiting}")
        seed = params.seed if params.seed is not None else secrets.randbits(64)
        sequence = Sequence(prompt, params, TextStream(self.tokenizer.decode, params.stop), np.random.default_rng(seed))
        if params.beams:
            sequence.search = BeamSearch(params.beams, self.eos_id, params.max_new_tokens)
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
            for sequence in [s for s in self._sequences() if s.gone]:
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
                for sequence in self._sequences():
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
        # First come, first served: a beam search at the head waits until it has all its rows.
        while self.waiting and self.cache.free_rows >= self.waiting[0].params.width:
            sequence = self.waiting.popleft()
            if sequence.search:
                sequence.beam_rows = [BeamRow(sequence, beam) for beam in range(sequence.params.width)]
            for slot in sequence.slots:
                slot.row = self.cache.allocate(len(sequence.prompt), sequence.params.max_new_tokens)
                self.rows.append(slot)
            sequence.admitted = time.perf_counter()
            if self.metrics:
                self.metrics.queued(sequence.admitted - sequence.arrived)
            admitted.append(sequence)
        return admitted

    def _model_turn(self, admitted: list[Sequence], rows: list) -> tuple[list[int | None], list[tuple]]:
        """In the model thread: encode the newly admitted sources, one decoder step for all rows, choose
        each row's next token (beam searches: their beams', rows reordered). -> the tokens (None for beam
        rows), and (stage, inputs, positions, seconds) of each model call."""
        timings = []
        # Sources of similar length are encoded together: padding costs as much as real tokens.
        for group in split_by_length(admitted, self.encode_split_cost, length=lambda s: len(s.prompt)):
            started = time.perf_counter()
            ids, mask = pad_batch([s.prompt for s in group], self.pad_id)
            cross = self.runner.encode(ids, mask)
            for i, sequence in enumerate(group):
                for slot in sequence.slots:
                    self.cache.write_cross(slot.row, [c[i] for c in cross[0::2]], [c[i] for c in cross[1::2]])
            timings.append(("encode", len(group), int(ids.size), time.perf_counter() - started))
        started = time.perf_counter()
        last = [self._last_token(slot) for slot in rows]
        inputs = self.cache.step_inputs()
        logits = self.runner.step(
            np.array(last, dtype=np.int64)[:, None],
            inputs["past_lengths"],
            inputs["encoder_attention_mask"],
            inputs["self"],
            inputs["cross"],
        )
        tokens = self._choose_tokens(rows, logits)
        for sequence in {id(s.sequence): s.sequence for s in rows if isinstance(s, BeamRow)}.values():
            self._beam_step(sequence, logits)
        timings.append(("decode", len(rows), len(rows), time.perf_counter() - started))
        return tokens, timings

    def _last_token(self, slot: Sequence | BeamRow) -> int:
        if isinstance(slot, BeamRow):
            token = slot.sequence.search.last_tokens[slot.beam]
            return self.bos_id if token is None else token
        return slot.generated[-1] if slot.generated else self.bos_id

    def _at_last_position(self, sequence: Sequence, generated: int) -> bool:
        """Whether the checkpoint forces eos here: at the last position the request allows."""
        return self.forced_eos and not sequence.params.ignore_eos and generated == sequence.params.max_new_tokens - 1

    def _choose_tokens(self, rows: list, logits: np.ndarray) -> list[int | None]:
        """Each greedy or sampled row's next token (None for beam rows): the greedy ones by one argmax."""
        tokens: list[int | None] = [None] * len(rows)
        greedy = [i for i, s in enumerate(rows) if isinstance(s, Sequence) and s.params.greedy]
        if greedy:
            chosen = logits[greedy]  # a copy: beam rows need the logits as they came
            chosen[:, self.suppressed_ids] = -np.inf
            for i, token in zip(greedy, chosen.argmax(axis=-1).tolist()):
                tokens[i] = token
        for i, sequence in enumerate(rows):
            if isinstance(sequence, BeamRow):
                continue
            if self._at_last_position(sequence, len(sequence.generated)):
                tokens[i] = self.eos_id
            elif tokens[i] is None:
                row = logits[i].copy()
                row[self.suppressed_ids] = -np.inf
                tokens[i] = next_token(row, sequence.generated, sequence.params.sampling, sequence.rng)
        return tokens

    def _beam_step(self, sequence: Sequence, logits: np.ndarray) -> None:
        """One step of a beam search; its beams' cache rows then follow their parents."""
        search = sequence.search
        log_probs = log_softmax(logits[[slot.row for slot in sequence.beam_rows]])
        log_probs[:, self.suppressed_ids] = -np.inf
        if self._at_last_position(sequence, search.length - 1):
            log_probs[:] = -np.inf
            log_probs[:, self.eos_id] = 0.0
        if self.renormalize_logits:
            log_probs = log_softmax(log_probs)
        parents = search.step(log_probs)
        if search.done:
            return
        sequence.beam_rows, copies = reorder_beams(sequence.beam_rows, parents.tolist())
        for source, target in copies:
            self.cache.copy_row(source, target, self.cache.lengths[source] + 1)  # + the step just taken

    def _advance(self, tokens: list[int | None]) -> None:
        # The step filled one more position of every row: count it before any row moves.
        self.cache.lengths[: len(tokens)] += 1
        now = time.perf_counter()
        searches = {id(owner(s)): owner(s) for s in self.rows[: len(tokens)] if isinstance(s, BeamRow)}
        for sequence, token in zip(list(self.rows), tokens):
            if token is None or sequence.gone:
                continue  # beam rows: below; gone: leaves at the start of the next turn
            if self.metrics:
                if sequence.first_token is None:
                    self.metrics.first_token(now - sequence.arrived)
                else:
                    self.metrics.between_tokens(now - sequence.last_token)
            if sequence.first_token is None:
                sequence.first_token = now
            sequence.last_token = now
            if token == self.eos_id and not sequence.params.ignore_eos:
                forced = self._at_last_position(sequence, len(sequence.generated))
                sequence.finish(LENGTH if forced else EOS, sequence.text.update(sequence.generated, final=True))
                self._leave(sequence)
                continue
            sequence.generated.append(token)
            sequence.unsent.append(token)
            if self.metrics:
                self.metrics.generated(1)
            at_limit = len(sequence.generated) >= sequence.params.max_new_tokens
            if not (at_limit or sequence.params.events_per_token):
                continue  # the text is decoded once, at the end
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
        for sequence in searches.values():
            if sequence.search.done and not sequence.gone:
                self._finish_search(sequence, now)

    def _finish_search(self, sequence: Sequence, now: float) -> None:
        """A beam search ends with one event: the best hypothesis, whole, and the n best."""
        hypotheses = tuple(
            self._hypothesis(sequence, tokens, score)
            for tokens, score in sequence.search.best(sequence.params.beams.num_return_sequences)
        )
        best = hypotheses[0]
        sequence.generated = best.token_ids
        sequence.unsent = list(best.token_ids)
        sequence.first_token = sequence.last_token = now
        if self.metrics:
            self.metrics.first_token(now - sequence.arrived)
            self.metrics.generated(len(best.token_ids))
        sequence.finish(best.finish_reason, best.text, hypotheses)
        self._leave(sequence)

    def _hypothesis(self, sequence: Sequence, tokens: list[int], score: float) -> Hypothesis:
        ended = bool(tokens) and tokens[-1] == self.eos_id
        forced = ended and self._at_last_position(sequence, len(tokens) - 1)
        generated = tokens[:-1] if ended else tokens
        reason = EOS if ended and not forced else LENGTH
        return Hypothesis(self.tokenizer.decode(generated), generated, reason, score)

    def _leave(self, sequence: Sequence) -> None:
        """Free the sequence's rows; the last rows move into them."""
        for slot in sequence.slots:
            moved = self.cache.free(slot.row)
            last = self.rows.pop()
            if moved is not None:
                self.rows[slot.row] = last
                last.row = slot.row
            slot.row = None

"""A fake seq2seq model for the scheduler's tests: every token a known function of its row's source and history
as the real cache holds them (CPU buffers, the model's cache graphs), a detokenizer of words, and a scheduler
serving them; no model, no server."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from model.export.cache_graphs import CACHE_GRAPHS
from modeldir.files import cache_names
from service.engine.generation_cache import MIN_SOURCE_CAPACITY, GenerationCache
from service.engine.scheduler import Scheduler
from service.engine.sequence import EOS as EOS_REASON
from service.engine.sequence import LENGTH, Event, GenerationParams
from service.engine.steps import SchedulerSettings
from service.engine.token_choice import GenerationRules, TokenChoice
from service.errors import Unavailable
from service.ops.metrics import ModelMetrics
from service.runner.cache_memory import CacheGeometry, CacheMemory, CrossLayout, one_buffer_resize
from service.runner.seq2seq import EncoderOutput, StepOutput

from .health_record import HealthRecord
from .waits import wait_until

VOCAB = 64
BOS, EOS, PAD = 0, 1, 2  # the decoder's start token, end of sequence, padding of sources
FIRST_WORD = 3  # tokens FIRST_WORD.. are words
BEAM_PROMPT = 47  # a source that starts with it gets the logits of BEAM_TREE
EOS_MARK = 48  # a source that starts with EOS_MARK + n ends with eos after n tokens
GEOMETRY = CacheGeometry(n_layers=1, n_heads=1, d_head=1, target_tokens=24, source_tokens=40)
MAX_NEW = GEOMETRY.target_tokens - 1
SESSIONS = {
    role: ort.InferenceSession(
        (one_buffer_resize if role == "cache_resize" else bytes)(make(GEOMETRY.n_layers, "fp32").SerializeToString()),
        providers=["CPUExecutionProvider"],
    )
    for role, make in CACHE_GRAPHS.items()
}
PATIENCE = 20.0  # seconds: only a broken scheduler makes a test wait this long

# The beam prompt's next-token probabilities after each history (any other history: eos, 0.9); every other
# token gets FLOOR. Greedy goes 10 (0.5), 20 (0.2, the first of four ties), eos; a beam search finds that
# 11 (0.4) then eos (0.9) is better, and files 10 20 and 10 21 behind it.
BEAM_TREE = {
    (): {10: 0.5, 11: 0.4},
    (10,): {20: 0.2, 21: 0.2, 22: 0.2, 23: 0.2, EOS: 0.1},
    (11,): {EOS: 0.9},
}
FLOOR = 1e-4


def word(x: int) -> int:
    return FIRST_WORD + x % (VOCAB - FIRST_WORD)


def greedy_next(prompt: list[int], generated: list[int]) -> int:
    """The fake model's argmax after `generated`: eos after prompt[0] - EOS_MARK tokens if prompt[0] >= EOS_MARK,
    else a word that depends on the whole source and every token so far."""
    if prompt[0] >= EOS_MARK and len(generated) == prompt[0] - EOS_MARK:
        return EOS
    return word(sum(prompt) + sum(generated) + 1)


def model_logits(prompt: list[int], generated: list[int]) -> np.ndarray:
    """(VOCAB,) float32: what the fake decoder gives after `generated` for this source."""
    if prompt[0] == BEAM_PROMPT:
        logits = np.full(VOCAB, np.log(FLOOR), np.float32)
        for token, p in BEAM_TREE.get(tuple(generated), {EOS: 0.9}).items():
            logits[token] = np.log(p)
        return logits
    logits = np.full(VOCAB, -10.0, np.float32)
    logits[greedy_next(prompt, generated)] = 10.0
    return logits


def expected(prompt: list[int], max_new_tokens: int) -> tuple[list[int], str]:
    """The greedy answer: token ids (without eos) and finish reason."""
    ids: list[int] = []
    while len(ids) < max_new_tokens:
        token = int(np.argmax(model_logits(prompt, ids)))
        if token == EOS:
            return ids, EOS_REASON
        ids.append(token)
    return ids, LENGTH


def steps_needed(prompt: list[int], max_new_tokens: int) -> int:
    """Decoder steps a greedy sequence takes: one a token, and one for its eos."""
    ids, reason = expected(prompt, max_new_tokens)
    return len(ids) + (reason == EOS_REASON)


def rows_per_step(needs: list[int], rows: int) -> list[int]:
    """Rows each step runs when sequences needing these steps all arrive at once and are admitted first come
    first served while rows are free, each leaving with its last step."""
    waiting, running, counts = deque(needs), [], []
    while waiting or running:
        while waiting and len(running) < rows:
            running.append(waiting.popleft())
        counts.append(len(running))
        running = [left - 1 for left in running if left > 1]
    return counts


class FakeRunner:
    """encode() and step() as runner/seq2seq.py's, over the real cache memory: the encoder's cross K/V of a
    source is its token ids; a step writes each row's input token into the row's self-attention buffer at its
    past length, reads the source from its group's cross row and its history (the start token, then every
    token so far) from its self buffer, and gives model_logits of them. A row holding another row's data, or a
    stale one, gets other tokens."""

    def __init__(self, fail_steps: tuple[int, ...] = (), fail_encodes: tuple[int, ...] = ()):
        self.fail_steps, self.fail_encodes = fail_steps, fail_encodes  # which calls raise (0: the first)
        self.encoded: list[list[tuple[int, ...]]] = []  # each encoder call's sources
        self.steps: list[list[tuple[int, ...]]] = []  # each step's rows' sources, in row order
        self.encode_calls = 0

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> EncoderOutput:
        call, self.encode_calls = self.encode_calls, self.encode_calls + 1
        if call in self.fail_encodes:
            raise RuntimeError("fake encoder fault")
        lengths = attention_mask.sum(axis=1)
        assert (attention_mask == (np.arange(input_ids.shape[1]) < lengths[:, None])).all(), attention_mask
        assert (input_ids[attention_mask == 0] == PAD).all(), input_ids
        self.encoded.append([tuple(row[:n].tolist()) for row, n in zip(input_ids, lengths)])
        values = input_ids.astype(np.float32)[:, None, :, None]  # (B, H, S, Dh)
        cross = [ort.OrtValue.ortvalue_from_numpy(values.copy()) for _ in cache_names("cross", GEOMETRY.n_layers)]
        return EncoderOutput(cross, input_ids.nbytes + attention_mask.nbytes, 0)

    def step(self, input_ids, past_lengths, layout: CrossLayout, logit_rows, memory: CacheMemory, rows: int, **options):
        assert not options.get("logits_on_device")  # no sampling graph here: logits come to the host
        if len(self.steps) in self.fail_steps:
            self.steps.append([])
            raise RuntimeError("fake decoder fault")
        assert input_ids.shape == (rows, 1) and past_lengths.shape == layout.row_slots.shape == (rows,)
        width = len(layout.query_slots) // layout.groups
        assert (layout.query_slots[layout.row_slots] == np.arange(rows)).all(), layout
        history = memory.self_buffers[0].numpy()  # (cache rows, H, target tokens, Dh), the buffer itself
        sources = memory.cross_buffers[0].numpy()
        logits, prompts = np.empty((rows, VOCAB), np.float32), []
        for row in range(rows):
            filled = int(past_lengths[row])
            history[row, 0, filled, 0] = input_ids[row, 0]  # as a decoder step writes its K/V, in place
            tokens = history[row, 0, : filled + 1, 0].astype(np.int64).tolist()
            assert tokens[0] == BOS, f"row {row} does not start with the start token: {tokens}"
            group = int(layout.row_slots[row]) // width  # the cross row this row reads
            prompt = sources[group, 0, : layout.source_lengths[group], 0].astype(np.int64).tolist()
            prompts.append(tuple(prompt))
            logits[row] = model_logits(prompt, tokens[1:])
        self.steps.append(prompts)
        wanted = list(logit_rows)
        next_tokens = logits.argmax(axis=1).astype(np.int64)
        return StepOutput(next_tokens, logits[wanted], wanted, input_ids.nbytes, next_tokens.nbytes)

    def rows_with(self, prompt: list[int]) -> list[int]:
        """The steps that ran a row of this source."""
        return [i for i, step in enumerate(self.steps) if tuple(prompt) in step]


class WordStream:
    def __init__(self):
        self.first = True

    def step(self, token: int) -> str:
        text = ("" if self.first else " ") + f"w{token}"
        self.first = False
        return text

    def flush(self) -> str:
        return ""


class Words:
    """A detokenizer: token 7 is "w7", words separated by spaces."""

    def decode(self, ids: list[int]) -> str:
        return " ".join(f"w{token}" for token in ids)

    def stream_decoder(self) -> WordStream:
        return WordStream()


@dataclass
class Served:
    scheduler: Scheduler
    runner: FakeRunner
    cache: GenerationCache
    health: HealthRecord


@contextlib.asynccontextmanager
async def serving(
    rows: int,
    max_waiting: int = 64,
    runner: FakeRunner | None = None,
    start: bool = True,
    cross_tokens: int = 0,
    metrics: ModelMetrics | None = None,
):
    """A scheduler over a cache of `rows` rows (and cross_tokens source positions, 0: room for the
    longest source in each), its model thread one worker, reporting to `metrics`; stopped after."""
    runner = runner or FakeRunner()
    cache = GenerationCache(
        CacheMemory(GEOMETRY, rows, "cpu", SESSIONS, MIN_SOURCE_CAPACITY, cross_tokens=cross_tokens)
    )
    settings = SchedulerSettings(bos_id=BOS, pad_id=PAD, max_waiting=max_waiting, name="fake")
    health = HealthRecord()
    with ThreadPoolExecutor(1) as executor:
        scheduler = Scheduler(
            settings,
            runner,
            cache,
            Words(),
            TokenChoice(GenerationRules(eos_id=EOS)),
            executor=executor,
            health=health,
            metrics=metrics,
        )
        if start:
            scheduler.start()
        try:
            yield Served(scheduler, runner, cache, health)
        finally:
            await scheduler.stop(Unavailable("the test is over"))


def run(main):
    return asyncio.run(asyncio.wait_for(main(), PATIENCE))


async def until(condition, what: str) -> None:
    """Wait for a condition of the loop's state (polled in a thread, so the loop runs meanwhile)."""
    await asyncio.to_thread(wait_until, condition, PATIENCE, what)


@dataclass
class Outcome:
    ids: list[int]
    text: str
    last: Event

    @property
    def finish_reason(self) -> str | None:
        return self.last.finish_reason


async def generate(scheduler: Scheduler, prompt: list[int], params: GenerationParams) -> Outcome:
    events = [event async for event in scheduler.generate(prompt, params)]
    assert all(event.finish_reason is None for event in events[:-1])
    return Outcome([t for event in events for t in event.token_ids], "".join(e.text for e in events), events[-1])


def greedy(max_new_tokens: int, stream: bool = True) -> GenerationParams:
    return GenerationParams(max_new_tokens=max_new_tokens, stream=stream)


def assert_answer(outcome: Outcome, prompt: list[int], max_new_tokens: int) -> None:
    ids, reason = expected(prompt, max_new_tokens)
    assert (outcome.ids, outcome.finish_reason) == (ids, reason), prompt
    assert outcome.text == Words().decode(ids)
    assert outcome.last.usage.generated_tokens == len(ids) and outcome.last.usage.prompt_tokens == len(prompt)


def assert_idle(served: Served) -> None:
    cache, rows = served.cache, served.scheduler.rows
    assert cache.used == 0 and cache.reserved_tokens == 0 and cache.holders == []
    counters = (
        rows.beams,
        rows.sampled,
        rows.ignoring_eos,
        rows.awaiting_first,
        rows.forcing,
        rows.scoring,
        rows.ruling,
    )
    assert counters == (0,) * 7, counters
    assert not served.scheduler.waiting and served.scheduler.running == 0

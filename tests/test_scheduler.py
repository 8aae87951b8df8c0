"""The generation scheduler (engine/scheduler.py) over a fake runner whose every token is a known function of
its row's source and history as the real cache holds them (CPU buffers, the model's cache graphs): no model, no
server."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given
from hypothesis import strategies as st

from model.export.cache_graphs import CACHE_GRAPHS
from modeldir.files import cache_names
from service.engine.beam_search import BeamSettings, log_softmax
from service.engine.generation_cache import MIN_SOURCE_CAPACITY, GenerationCache
from service.engine.scheduler import Scheduler
from service.engine.sequence import EOS as EOS_REASON
from service.engine.sequence import LENGTH, Event, GenerationParams
from service.engine.steps import SchedulerSettings
from service.engine.token_choice import GenerationRules, TokenChoice
from service.errors import InvalidArgument, QueueFull, Unavailable
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
    rows: int, max_waiting: int = 64, runner: FakeRunner | None = None, start: bool = True, cross_tokens: int = 0
):
    """A scheduler over a cache of `rows` rows (and cross_tokens source positions, 0: room for the
    longest source in each), its model thread one worker; stopped after."""
    runner = runner or FakeRunner()
    cache = GenerationCache(
        CacheMemory(GEOMETRY, rows, "cpu", SESSIONS, MIN_SOURCE_CAPACITY, cross_tokens=cross_tokens)
    )
    settings = SchedulerSettings(bos_id=BOS, pad_id=PAD, max_waiting=max_waiting, name="fake")
    health = HealthRecord()
    with ThreadPoolExecutor(1) as executor:
        scheduler = Scheduler(
            settings, runner, cache, Words(), TokenChoice(GenerationRules(eos_id=EOS)), executor=executor, health=health
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
    cache = served.cache
    assert cache.used == 0 and cache.reserved_tokens == 0 and cache.holders == []
    assert not served.scheduler.waiting and served.scheduler.running == 0


@pytest.mark.parametrize("stream", [True, False])
def test_greedy_generation_gives_the_models_tokens_and_finish_reasons(stream):
    cases = [
        ([5, 9, 12], 6),  # never eos: ends by length
        ([EOS_MARK + 2, 4], 6),  # eos after 2 tokens
        ([EOS_MARK, 30], 6),  # eos first: no token
        ([EOS_MARK + 7, 3, 3], 7),  # eos would come after the 7th token: the length ends it first
        ([EOS_MARK + 7, 3, 3], 8),
    ]

    async def main():
        async with serving(rows=2) as served:
            outcomes = [await generate(served.scheduler, prompt, greedy(n, stream)) for prompt, n in cases]
            assert_idle(served)
        return outcomes

    outcomes = run(main)
    assert outcomes[0].ids == [30, 60, 59, 57, 53, 45]  # sum 26 + 1, then each token adds itself
    assert outcomes[0].text == "w30 w60 w59 w57 w53 w45" and outcomes[0].finish_reason == LENGTH
    assert outcomes[1].finish_reason == EOS_REASON and len(outcomes[1].ids) == 2
    assert (outcomes[2].ids, outcomes[2].text, outcomes[2].finish_reason) == ([], "", EOS_REASON)
    assert [o.finish_reason for o in outcomes[3:]] == [LENGTH, EOS_REASON] and outcomes[3].ids == outcomes[4].ids
    for outcome, (prompt, n) in zip(outcomes, cases):
        assert_answer(outcome, prompt, n)


def test_sequences_of_different_lengths_share_one_continuous_batch():
    """All arrive at once, each gets its own answer, and each leaves the batch with its last step."""
    cases = [
        ([7] * 40, 12),  # the longest source: the cross buffers grow to it
        ([EOS_MARK + 3, 5], 20),
        ([9, 8, 7, 6, 5, 4, 3, 9, 8, 7, 6, 5, 4, 3, 9, 8, 7], 1),
        ([EOS_MARK + 9] + [11] * 20, MAX_NEW),
        ([33], MAX_NEW),
        ([EOS_MARK], 5),
    ]

    async def main():
        async with serving(rows=8) as served:
            outcomes = await asyncio.gather(
                *(generate(served.scheduler, p, greedy(n, i % 2 == 0)) for i, (p, n) in enumerate(cases))
            )
            assert_idle(served)
            assert served.cache.source_capacity == MIN_SOURCE_CAPACITY  # shrunk back once empty
        for outcome, (prompt, n) in zip(outcomes, cases):
            assert_answer(outcome, prompt, n)
        runner = served.runner
        assert [len(step) for step in runner.steps] == rows_per_step([steps_needed(p, n) for p, n in cases], 8)
        assert sorted(s for call in runner.encoded for s in call) == sorted(tuple(p) for p, _ in cases)
        assert served.scheduler.largest_step == len(cases)
        assert served.health.calls == ["succeeded"] * len(runner.steps)

    run(main)


def test_requests_beyond_the_rows_wait_and_take_rows_as_they_free_up():
    cases = [([10 + i, 4 + i], n) for i, n in enumerate([5, 2, 7, 1, 3, 4])] + [([EOS_MARK + 1, 3], 9)]

    async def main():
        async with serving(rows=2) as served:
            outcomes = await asyncio.gather(*(generate(served.scheduler, p, greedy(n)) for p, n in cases))
            assert_idle(served)
        for outcome, (prompt, n) in zip(outcomes, cases):
            assert_answer(outcome, prompt, n)
        runner = served.runner
        # Never more rows than the cache has; admitted first come first served, each as a row frees up.
        assert [len(step) for step in runner.steps] == rows_per_step([steps_needed(p, n) for p, n in cases], 2)
        assert [s for call in runner.encoded for s in call] == [tuple(p) for p, _ in cases]
        assert served.scheduler.largest_step == 2
        for prompt, n in cases:  # each sequence ran its steps back to back, in one row
            ran = runner.rows_with(prompt)
            assert ran == list(range(ran[0], ran[0] + steps_needed(prompt, n)))

    run(main)


def test_a_long_source_waits_for_room_in_the_cross_buffers_first_come_first_served():
    """Room for one source of 40 positions or two of 16: a long source first runs alone while two short
    ones wait behind it (rows are free), then the two run together at the capacity of 16."""
    long, shorts = [FIRST_WORD + i % 20 for i in range(35)], [[10, 4, 5], [11, 4, 6]]
    cases = [(long, 5)] + [(short, 2) for short in shorts]

    async def main():
        async with serving(rows=3, cross_tokens=40) as served:
            outcomes = await asyncio.gather(*(generate(served.scheduler, p, greedy(n)) for p, n in cases))
            assert_idle(served)
            assert served.cache.source_capacity == MIN_SOURCE_CAPACITY
        for outcome, (prompt, n) in zip(outcomes, cases):
            assert_answer(outcome, prompt, n)
        alone, together = steps_needed(long, 5), steps_needed(shorts[0], 2)
        assert [len(step) for step in served.runner.steps] == [1] * alone + [2] * together
        assert [s for call in served.runner.encoded for s in call] == [tuple(p) for p, _ in cases]

    run(main)


def test_a_re_layout_that_fails_on_the_device_fails_its_request_and_the_loop_goes_on():
    """The cross buffers' growth for a long source fails (as an allocation on a full GPU would): that
    request gets the error, the cache is as it was, and the next requests are answered."""
    long, short = [FIRST_WORD + i % 20 for i in range(35)], [10, 4, 5]

    async def main():
        async with serving(rows=3) as served:
            memory, resize = served.cache.memory, served.cache.memory.resize_cross

            def fail_once(capacity, used):
                memory.resize_cross = resize  # the next one succeeds
                raise RuntimeError("no device memory for the new buffers")

            memory.resize_cross = fail_once
            with pytest.raises(RuntimeError, match="no device memory"):
                await generate(served.scheduler, long, greedy(4))
            assert (served.cache.used, served.cache.groups) == (0, 0)
            assert_answer(await generate(served.scheduler, short, greedy(3)), short, 3)
            assert_answer(await generate(served.scheduler, long, greedy(4)), long, 4)
            assert_idle(served)

    run(main)


def test_past_max_waiting_a_request_is_refused_with_queue_full():
    cases = [([5, 6], 3), ([7, 8], 4)]

    async def main():
        async with serving(rows=1, max_waiting=2, start=False) as served:
            scheduler = served.scheduler
            calls = [asyncio.create_task(generate(scheduler, p, greedy(n))) for p, n in cases]
            await until(lambda: len(scheduler.waiting) == 2, "two requests waiting")
            refused = scheduler.generate([9], greedy(3))
            with pytest.raises(QueueFull, match="2 requests are waiting; the queue holds 2"):
                await anext(refused)
            scheduler.start()
            outcomes = await asyncio.gather(*calls)
            for outcome, (prompt, n) in zip(outcomes, cases):
                assert_answer(outcome, prompt, n)
            assert_answer(await generate(scheduler, [9], greedy(3)), [9], 3)  # room again
            assert (9,) not in [s for call in served.runner.encoded[:2] for s in call]  # the refused one never ran
            assert_idle(served)

    run(main)


@pytest.mark.parametrize(
    "prompt, max_new_tokens, message",
    [
        ([5] * (GEOMETRY.source_tokens + 1), 3, r"41 tokens and 3 decoder steps never fit the cache of model 'fake'"),
        ([5, 6], MAX_NEW + 1, r"2 tokens and 24 decoder steps never fit .* \(at most 40 tokens and 23 steps\)"),
    ],
)
def test_a_request_that_never_fits_the_cache_is_refused_and_the_loop_goes_on(prompt, max_new_tokens, message):
    """The core's limits keep such requests out; the scheduler refuses one all the same, before it queues."""

    async def main():
        async with serving(rows=2) as served:
            with pytest.raises(InvalidArgument, match=message):
                await generate(served.scheduler, prompt, greedy(max_new_tokens))
            assert not served.scheduler.waiting
            assert_answer(await generate(served.scheduler, [5, 6], greedy(3)), [5, 6], 3)
            assert_idle(served)

    run(main)


@pytest.mark.parametrize(
    "num_beams, num_return_sequences, best",
    [
        (2, 1, [[11]]),
        (2, 2, [[11], [10, 20]]),
        (3, 3, [[11], [10, 20], [10, 21]]),
    ],
)
def test_beam_search_finds_the_best_hypotheses_beside_greedy_rows(num_beams, num_return_sequences, best):
    prompt = [BEAM_PROMPT, 5]
    beams = BeamSettings(num_beams=num_beams, num_return_sequences=num_return_sequences)
    params = GenerationParams(max_new_tokens=5, beams=beams)
    others = [([6, 7], 9), ([EOS_MARK + 2, 8], 9)]

    async def main():
        async with serving(rows=num_beams + 1 + len(others)) as served:
            searched, greedy_one, *rest = await asyncio.gather(
                generate(served.scheduler, prompt, params),
                generate(served.scheduler, prompt, greedy(5)),
                *(generate(served.scheduler, p, greedy(n)) for p, n in others),
            )
            assert_idle(served)
            assert served.scheduler.largest_step == num_beams + 1 + len(others)
        # Greedy takes the likelier first token; the search, the likelier whole.
        assert (greedy_one.ids, greedy_one.finish_reason) == ([10, 20], EOS_REASON)
        assert (searched.ids, searched.text, searched.finish_reason) == ([11], "w11", EOS_REASON)
        hypotheses = searched.last.hypotheses
        assert [h.token_ids for h in hypotheses] == best
        assert [h.text for h in hypotheses] == [Words().decode(ids) for ids in best]
        assert all(h.finish_reason == EOS_REASON for h in hypotheses)
        scores = [h.score for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
        for hypothesis in hypotheses:  # sum(log p) over its tokens and eos, / their number (length_penalty 1)
            path = hypothesis.token_ids + [EOS]
            log_p = sum(float(log_softmax(model_logits(prompt, path[:i])[None])[0, t]) for i, t in enumerate(path))
            assert hypothesis.score == pytest.approx(log_p / len(path), rel=1e-4)
            assert hypothesis.mean_log_prob == pytest.approx(log_p / len(path), rel=1e-4)
        assert searched.last.mean_log_prob == hypotheses[0].mean_log_prob
        for outcome, (p, n) in zip(rest, others):
            assert_answer(outcome, p, n)

    run(main)


def test_beam_search_cut_by_its_length_ends_by_length():
    params = GenerationParams(max_new_tokens=1, beams=BeamSettings(num_beams=2, num_return_sequences=2))

    async def main():
        async with serving(rows=2) as served:
            outcome = await generate(served.scheduler, [BEAM_PROMPT], params)
            assert_idle(served)
        assert [(h.token_ids, h.finish_reason) for h in outcome.last.hypotheses] == [([10], LENGTH), ([11], LENGTH)]
        assert (outcome.ids, outcome.finish_reason) == ([10], LENGTH)

    run(main)


@pytest.mark.parametrize("how", ["stops iterating", "is cancelled"])
def test_a_caller_that_leaves_frees_its_row_and_the_others_finish(how):
    leaving = [21, 22, 23]
    others = [([5, 5], 15), ([EOS_MARK + 4, 6], 15), ([7], 3)]

    async def leave(scheduler, got: list[int], enough: asyncio.Event):
        if how == "stops iterating":
            async with contextlib.aclosing(scheduler.generate(leaving, greedy(MAX_NEW))) as events:
                async for event in events:
                    got.extend(event.token_ids)
                    if len(got) >= 3:
                        break
            return
        async for event in scheduler.generate(leaving, greedy(MAX_NEW)):
            got.extend(event.token_ids)
            if len(got) >= 3:
                enough.set()

    async def main():
        async with serving(rows=3) as served:  # the last of `others` waits for a row
            got, enough = [], asyncio.Event()
            leaver = asyncio.create_task(leave(served.scheduler, got, enough))
            outcomes = asyncio.gather(*(generate(served.scheduler, p, greedy(n)) for p, n in others))
            if how == "is cancelled":
                await enough.wait()
                leaver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await leaver
            assert leaver.cancelled() == (how == "is cancelled")
            for outcome, (prompt, n) in zip(await outcomes, others):
                assert_answer(outcome, prompt, n)
            await until(lambda: served.cache.used == 0, "the cache empty")
            assert_idle(served)
            ran = served.runner.rows_with(leaving)
        assert got == expected(leaving, MAX_NEW)[0][: len(got)] and len(got) >= 3
        assert len(ran) < MAX_NEW  # it left long before its last token
        if how == "stops iterating":  # it leaves before the next step: at most the step in flight runs it
            assert len(ran) <= len(got) + 1, (len(ran), len(got))

    run(main)


@pytest.mark.parametrize("stage", ["encode", "decode"])
def test_a_failing_model_call_fails_its_callers_reports_it_and_the_loop_goes_on(stage):
    runner = FakeRunner(fail_encodes=(0,)) if stage == "encode" else FakeRunner(fail_steps=(1,))
    failing = [([5, 6], 6), ([EOS_MARK + 5, 7], 6)]  # the two rows of the first turn
    waiting = ([8, 9], 4)  # admitted after the failure, into a row freed by it

    async def main():
        async with serving(rows=2, runner=runner) as served:
            calls = [generate(served.scheduler, p, greedy(n)) for p, n in [*failing, waiting]]
            results = await asyncio.gather(*calls, return_exceptions=True)
            assert all(isinstance(r, RuntimeError) and "fake" in str(r) for r in results[:2]), results
            assert_answer(results[2], *waiting)
            before = ["failed"] if stage == "encode" else ["succeeded", "failed"]  # the decoder's first step passed
            calls = served.health.calls
            assert calls[: len(before)] == before and set(calls[len(before) :]) == {"succeeded"}, calls
            assert_idle(served)
            assert_answer(await generate(served.scheduler, [3, 4], greedy(5)), [3, 4], 5)

    run(main)


prompts = st.lists(st.integers(FIRST_WORD, VOCAB - 1), min_size=1, max_size=GEOMETRY.source_tokens).filter(
    lambda p: p[0] != BEAM_PROMPT
)


@given(
    requests=st.lists(st.tuples(prompts, st.integers(1, MAX_NEW), st.booleans()), min_size=1, max_size=10),
    rows=st.integers(1, 4),
    cross_tokens=st.sampled_from([0, 40, 64]),
)
def test_any_mix_of_sequences_gets_the_models_answers_and_leaves_the_cache_empty(requests, rows, cross_tokens):
    """cross_tokens 0: room for the longest source in every row, so admission goes by rows alone; 40 or
    64: sources share less room, and wait for it."""

    async def main():
        async with serving(rows=rows, cross_tokens=cross_tokens) as served:
            outcomes = await asyncio.gather(
                *(generate(served.scheduler, p, greedy(n, stream)) for p, n, stream in requests)
            )
            assert_idle(served)
        for outcome, (prompt, n, _) in zip(outcomes, requests):
            assert_answer(outcome, prompt, n)
        needs = [steps_needed(p, n) for p, n, _ in requests]
        if not cross_tokens:
            assert [len(step) for step in served.runner.steps] == rows_per_step(needs, rows)
        assert served.scheduler.largest_step <= rows

    run(main)

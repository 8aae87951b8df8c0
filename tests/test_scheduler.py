"""The generation scheduler (engine/scheduler.py) over a fake model (fake_seq2seq.py): greedy answers, one
continuous batch of sequences of different lengths, admission by rows and by source room, and the requests it
refuses."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.engine.generation_cache import MIN_SOURCE_CAPACITY
from service.engine.sequence import EOS as EOS_REASON
from service.engine.sequence import LENGTH
from service.errors import InvalidArgument, QueueFull

from .fake_seq2seq import (
    BEAM_PROMPT,
    EOS_MARK,
    FIRST_WORD,
    GEOMETRY,
    MAX_NEW,
    VOCAB,
    assert_answer,
    assert_idle,
    generate,
    greedy,
    rows_per_step,
    run,
    serving,
    steps_needed,
    until,
)


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

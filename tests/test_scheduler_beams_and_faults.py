"""The generation scheduler (engine/scheduler.py) over a fake model (fake_seq2seq.py), where requests part from
plain greedy rows: beam searches beside greedy rows, callers that leave, model calls that fail, and sequences
whose own token choice fails."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from service.engine.beam_search import BeamSettings, log_softmax
from service.engine.sampling import SamplingParams
from service.engine.sequence import EOS as EOS_REASON
from service.engine.sequence import LENGTH, GenerationParams
from service.ops.metrics import Metrics, ModelMetrics

from .fake_seq2seq import (
    BEAM_PROMPT,
    EOS,
    EOS_MARK,
    MAX_NEW,
    FakeRunner,
    Words,
    assert_answer,
    assert_idle,
    expected,
    generate,
    greedy,
    model_logits,
    run,
    serving,
    until,
    word,
)


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


class RaisingRules:
    """A sequence's own logit rules (logit_rules.py's protocol) that raise once it has `after` tokens: a
    fault in rules the server made from what one client sent (a glossary's term forcing, Whisper's)."""

    def __init__(self, after: int):
        self.after = after

    def apply(self, logits, tokens) -> None:
        if len(tokens) >= self.after:
            raise ValueError("fake rules fault")


HOT = SamplingParams(temperature=1.0)
# A sequence whose own token choice raises, and what it raises: rules of each row kind, and sampling
# parameters no door would pass (the doors' ranges are tested in test_sampling.py), drawn and greedy.
FAILING = {
    "rules, greedy": (GenerationParams(max_new_tokens=6, rules=RaisingRules(after=2)), ValueError),
    "rules, sampled": (
        GenerationParams(max_new_tokens=6, rules=RaisingRules(after=2), sampling=HOT, seed=5),
        ValueError,
    ),
    "rules, beams": (
        GenerationParams(max_new_tokens=6, rules=RaisingRules(after=2), beams=BeamSettings(num_beams=2)),
        ValueError,
    ),
    "rules on a forced step; ignore_eos, scores": (
        GenerationParams(
            max_new_tokens=6,
            rules=RaisingRules(after=1),
            forced_tokens=(word(3), word(4)),
            ignore_eos=True,
            scores=True,
            sampling=HOT,
            seed=5,
        ),
        ValueError,
    ),
    "sampling, drawn": (
        GenerationParams(max_new_tokens=6, sampling=SamplingParams(temperature=1.0, top_k=None)),
        TypeError,
    ),
    "sampling, penalized": (
        GenerationParams(max_new_tokens=6, sampling=SamplingParams(frequency_penalty="fault")),
        ValueError,
    ),
}


@pytest.mark.parametrize("kind", list(FAILING))
def test_a_sequence_whose_own_token_choice_raises_fails_alone(kind):
    """Its rules or sampling raise in a step it shares: it fails with that error, the others finish as they
    would alone (a seeded sampled row draws the same tokens), every step is the model's success (health),
    and the failed sequence's rows are freed."""
    failing, error_type = FAILING[kind]
    sampled = GenerationParams(max_new_tokens=8, sampling=HOT, seed=7, scores=True)

    async def main():
        async with serving(rows=4) as served:
            alone = await generate(served.scheduler, [9, 10], sampled)
            results = await asyncio.gather(
                generate(served.scheduler, [5, 6], failing),
                generate(served.scheduler, [7, 8], greedy(8)),
                generate(served.scheduler, [9, 10], sampled),
                return_exceptions=True,
            )
            assert type(results[0]) is error_type, results[0]
            assert_answer(results[1], [7, 8], 8)
            assert results[2].ids == alone.ids and len(alone.ids) > 2, (results[2].ids, alone.ids)
            assert results[2].last.token_log_probs == pytest.approx(alone.last.token_log_probs, rel=1e-6)
            assert set(served.health.calls) == {"succeeded"}, served.health.calls
            assert_idle(served)
            assert_answer(await generate(served.scheduler, [3, 4], greedy(5)), [3, 4], 5)

    run(main)


def test_a_sequence_whose_first_token_choice_fails_is_not_in_the_token_metrics():
    """No time to a first token and no token generated for a sequence that failed at its first choice (an
    eos put in its place would count where eos does not end it)."""
    metrics = Metrics()
    failing = GenerationParams(max_new_tokens=6, sampling=SamplingParams(temperature=1.0, top_k=None), ignore_eos=True)

    def sample(name: str) -> float:
        return metrics.registry.get_sample_value(name, {"model": "fake"})

    async def main():
        async with serving(rows=2, metrics=ModelMetrics(metrics, "fake", "seq2seq")) as served:
            results = await asyncio.gather(
                generate(served.scheduler, [5, 6], failing),
                generate(served.scheduler, [7, 8], greedy(8)),
                return_exceptions=True,
            )
            assert type(results[0]) is TypeError, results[0]
            assert_answer(results[1], [7, 8], 8)
            assert_idle(served)
        assert sample("attnserve_time_to_first_token_seconds_count") == 1
        assert sample("attnserve_generated_tokens_total") == len(results[1].ids)

    run(main)

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from service.engine.sampling import SamplingParams, next_token, penalize_repetition
from testing.sampling_reference import reference_next_token

LOGITS = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))


def draws(params: SamplingParams, n: int = 4000, seed: int = 0) -> Counter:
    rng = np.random.default_rng(seed)
    return Counter(next_token(LOGITS, [], params, rng) for _ in range(n))


def test_greedy_takes_the_argmax():
    assert next_token(LOGITS, [], SamplingParams(), np.random.default_rng(0)) == 0


def test_temperature_one_samples_the_distribution():
    counts = draws(SamplingParams(temperature=1.0))
    assert abs(counts[0] / 4000 - 0.5) < 0.03 and abs(counts[3] / 4000 - 0.05) < 0.015


def test_top_k_and_top_p_cut_the_tail():
    assert set(draws(SamplingParams(temperature=1.0, top_k=2))) == {0, 1}
    assert set(draws(SamplingParams(temperature=1.0, top_p=0.8))) == {0, 1}  # 0.5 + 0.3 reaches 0.8
    assert set(draws(SamplingParams(temperature=1.0, top_p=0.81))) == {0, 1, 2}


@given(seed=st.integers(0, 2**32 - 1))
def test_the_same_seed_gives_the_same_tokens(seed):
    params = SamplingParams(temperature=0.9, top_k=3, top_p=0.9)
    first = [next_token(LOGITS, [], params, rng) for rng in [np.random.default_rng(seed)] for _ in range(20)]
    second = [next_token(LOGITS, [], params, rng) for rng in [np.random.default_rng(seed)] for _ in range(20)]
    assert first == second


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    logits = np.array([2.0, -2.0, 1.0])
    assert penalize_repetition(logits, [0, 1, 0], 2.0).tolist() == [1.0, -4.0, 1.0]
    assert next_token(np.array([2.0, 1.5]), [0], SamplingParams(repetition_penalty=2.0), np.random.default_rng(0)) == 1


@given(
    seed=st.integers(0, 2**32 - 1),
    vocab=st.sampled_from([2, 7, 300, 5000]),
    temperature=st.floats(0.05, 3.0),
    top_k=st.sampled_from([0, 1, 5, 400]),
    top_p=st.sampled_from([1.0, 0.999, 0.9, 0.5, 0.05]),
    penalty=st.sampled_from([1.0, 1.3]),
    ties=st.booleans(),
)
def test_the_token_and_the_draw_are_those_of_a_full_sort_and_rng_choice(
    seed, vocab, temperature, top_k, top_p, penalty, ties
):
    """The same token at every one of 10 draws, and the generators left in the same state: a seed gives
    the tokens it gave before the nucleus was looked for among the most probable tokens first. Flat
    distributions (which make the nucleus outgrow the candidates) and tied logits included."""
    values = np.random.default_rng(seed)
    logits = values.standard_normal(vocab).astype(np.float32) * values.choice([0.1, 1.0, 8.0])
    if ties:
        logits = np.round(logits, 1)
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=penalty)
    generated = values.integers(0, vocab, 5).tolist()
    fast, plain = np.random.default_rng(seed + 1), np.random.default_rng(seed + 1)
    for _ in range(10):
        assert next_token(logits, generated, params, fast) == reference_next_token(logits, generated, params, plain)
    assert fast.random() == plain.random()

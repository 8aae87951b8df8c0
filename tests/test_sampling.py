"""Sampled rows' tokens, drawn on the host (service/engine/row_sampling.py) and by the sampling graph
(service/runner/sampling_graph.py, here on the CPU), against the plain form of the same rules
(testing/sampling_reference.py): the same token for the same generator, the same distribution, a row's
token whatever shares its step."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.calls.validation import MIN_REPETITION_PENALTY
from service.engine.row_sampling import RowSampler
from service.engine.sampling import SamplingParams
from service.runner.sampling_graph import SamplingGraph, sampling_graph
from testing.sampling_reference import reference_next_token, reference_probabilities

GRAPH = SamplingGraph(
    ort.InferenceSession(sampling_graph().SerializeToString(), providers=["CPUExecutionProvider"]), "cpu"
)
SAMPLERS = {"host": RowSampler, "graph": lambda: GRAPH}
KINDS = pytest.mark.parametrize("kind", list(SAMPLERS))


def sample_rows(kind: str, logits, generated, params, rngs) -> np.ndarray:
    """A step's sampled rows drawn by a sampler of their own (the graph's session is shared: it keeps
    nothing between steps but the bias)."""
    return SAMPLERS[kind]().sample(logits, generated, params, rngs)


LOGITS = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))


def draws(kind: str, params: SamplingParams, logits=LOGITS, n: int = 4000, seed: int = 0, generated=()) -> Counter:
    """n tokens of n rows of the same logits in one step, each row its own generator."""
    rows = np.repeat(np.asarray(logits, np.float32)[None], n, axis=0)
    rngs = [np.random.default_rng([seed, i]) for i in range(n)]
    return Counter(sample_rows(kind, rows, [list(generated)] * n, [params] * n, rngs).tolist())


@KINDS
def test_temperature_one_samples_the_distribution(kind):
    counts = draws(kind, SamplingParams(temperature=1.0))
    assert abs(counts[0] / 4000 - 0.5) < 0.03 and abs(counts[3] / 4000 - 0.05) < 0.015


@KINDS
def test_top_k_top_p_and_min_p_cut_the_tail(kind):
    assert set(draws(kind, SamplingParams(temperature=1.0, top_k=2))) == {0, 1}
    assert set(draws(kind, SamplingParams(temperature=1.0, top_p=0.79))) == {0, 1}  # 0.5 + 0.3 reaches 0.79
    assert set(draws(kind, SamplingParams(temperature=1.0, top_p=0.81))) == {0, 1, 2}
    assert set(draws(kind, SamplingParams(temperature=1.0, min_p=0.3))) == {0, 1, 2}  # 0.15 >= 0.3 x 0.5
    assert set(draws(kind, SamplingParams(temperature=1.0, min_p=0.31))) == {0, 1}


@KINDS
def test_penalties_move_the_tokens_already_generated(kind):
    logits = np.array([2.0, -2.0, 1.0], np.float32)
    # repetition 2: token 0's 2.0 becomes 1.0 and ties with token 2; a greedy-like temperature shows which wins
    assert set(draws(kind, SamplingParams(temperature=0.05, repetition_penalty=2.0), logits, generated=[0])) == {0, 2}
    # frequency 0.6 twice and presence 0.3: 2.0 - 1.2 - 0.3 = 0.5 < 1.0
    assert set(
        draws(
            kind,
            SamplingParams(temperature=0.01, frequency_penalty=0.6, presence_penalty=0.3),
            logits,
            generated=[0, 0],
        )
    ) == {2}
    assert set(draws(kind, SamplingParams(temperature=0.01, frequency_penalty=0.6), logits, generated=[0])) == {0}


@KINDS
def test_temperatures_past_float32_s_range_keep_their_meaning(kind):
    """A client may send any positive float: 1e-197 is 0 in float32 (every logit -inf or NaN, and the step
    failed for every sequence in it), 1e300 is inf (a token a logit rule masked, NaN)."""
    assert set(draws(kind, SamplingParams(temperature=1e-197, min_p=0.5))) == {0}
    tied = np.array([1.0, 3.0, 3.0, -np.inf], np.float32)
    assert set(draws(kind, SamplingParams(temperature=1e-197), tied)) == {1, 2}
    counts = draws(kind, SamplingParams(temperature=1e300), np.array([5.0, -5.0, 0.0, -np.inf], np.float32))
    assert set(counts) == {0, 1, 2} and all(abs(n / 4000 - 1 / 3) < 0.03 for n in counts.values()), counts


@KINDS
def test_the_drawn_tokens_follow_the_reference_distribution(kind):
    """A chi-square test of 20,000 draws of a 300-token distribution with every rule on (its statistic, 19
    degrees of freedom once small classes are pooled, is under 43.8 with probability 0.999)."""
    values = np.random.default_rng(7)
    logits = values.standard_normal(300).astype(np.float32) * 2
    params = SamplingParams(temperature=0.7, top_k=60, top_p=0.95, min_p=0.002, repetition_penalty=1.3)
    generated = values.integers(0, 300, 10).tolist()
    expected, _ = reference_probabilities(logits, generated, params)
    counts = draws(kind, params, logits, n=20000, generated=generated)
    assert set(counts) <= set(np.flatnonzero(expected).tolist())
    order = np.argsort(-expected)
    classes = [order[:19], order[19:]]  # the 19 most probable tokens apart, the rest pooled
    classes = [[t] for t in classes[0]] + [classes[1]]
    observed = np.array([sum(counts[int(t)] for t in c) for c in classes])
    wanted = np.array([expected[c].sum() for c in classes]) * 20000
    assert wanted.min() > 5
    assert ((observed - wanted) ** 2 / wanted).sum() < 43.8


@KINDS
@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    vocab=st.sampled_from([2, 7, 64, 300, 5000]),
    temperature=st.floats(0.05, 3.0),
    top_k=st.sampled_from([0, 1, 5, 400]),
    top_p=st.sampled_from([1.0, 0.999, 0.9, 0.5, 0.05]),
    min_p=st.sampled_from([0.0, 0.05]),
    penalties=st.sampled_from([(1.0, 0.0, 0.0), (1.3, 0.0, 0.0), (1.0, 0.5, 0.2)]),
    ties=st.booleans(),
)
def test_each_row_draws_the_reference_token(kind, seed, vocab, temperature, top_k, top_p, min_p, penalties, ties):
    """Rows of one step with their own logits and rules: at each of 10 steps, each row's token is the plain
    form's for the same generator (except where the draw fell within 1e-6 of an edge, where float32 and
    float64 sums may part), and every generator was used once a step."""
    values = np.random.default_rng(seed)
    rows = 4
    logits = values.standard_normal((rows, vocab)) * values.choice([0.1, 1.0, 8.0])
    logits = (np.round(logits, 1) if ties else logits).astype(np.float32)  # float32, as a step's logits are
    repetition, frequency, presence = penalties
    params = [
        SamplingParams(
            temperature=temperature * (1 + row),
            top_k=top_k,
            top_p=top_p,
            min_p=min_p if row % 2 else 0.0,
            repetition_penalty=repetition,
            frequency_penalty=frequency,
            presence_penalty=presence,
        )
        for row in range(rows)
    ]
    generated = [values.integers(0, vocab, 5).tolist() for _ in range(rows)]
    served = [np.random.default_rng([seed, row]) for row in range(rows)]
    plain = [np.random.default_rng([seed, row]) for row in range(rows)]
    compared_draws(kind, logits, generated, params, served, plain)  # asserts each token it compares
    assert all(a.random() == b.random() for a, b in zip(served, plain))


@KINDS
@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    temperature=st.floats(0.0, exclude_min=True, allow_infinity=False),  # any a door accepts (JSON's doubles)
    top_k=st.integers(0, 2**64 - 1),
    top_p=st.floats(0.0, 1.0, exclude_min=True),
    min_p=st.floats(0.0, 1.0, exclude_max=True),
    repetition=st.floats(MIN_REPETITION_PENALTY, 1 / MIN_REPETITION_PENALTY),
    frequency=st.floats(-2.0, 2.0),
    presence=st.floats(-2.0, 2.0),
)
def test_any_parameters_the_doors_take_draw_a_token_no_rule_masked(
    kind, seed, temperature, top_k, top_p, min_p, repetition, frequency, presence
):
    """What validation lets through (service/core/calls/validation.py) draws a token of the vocabulary and
    never one a logit rule masked (-inf): a decode step that raised would fail every sequence in it."""
    values = np.random.default_rng(seed)
    logits = (values.standard_normal((3, 50)) * values.choice([0.1, 8.0, 1e4])).astype(np.float32)
    masked = values.choice(50, 10, replace=False)
    logits[:, masked] = -np.inf
    params = SamplingParams(
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        repetition_penalty=repetition,
        frequency_penalty=frequency,
        presence_penalty=presence,
    )
    generated = [values.integers(0, 50, 4).tolist() for _ in range(3)]
    rngs = [np.random.default_rng([seed, row]) for row in range(3)]
    tokens = sample_rows(kind, logits, generated, [params] * 3, rngs)
    assert all(0 <= t < 50 and t not in masked for t in tokens.tolist()), (tokens, params)


def compared_draws(kind: str, logits, generated, params, served, plain, steps: int = 10) -> int:
    """Each row's token at each step against the plain form's for the same generator, except where the draw
    (or the nucleus's cut) fell within 1e-6 of an edge, where float32 and float64 sums may part. -> how many
    were compared."""
    compared = 0
    for _ in range(steps):
        tokens = sample_rows(kind, logits.copy(), generated, params, served)
        for row in range(len(params)):
            token, margin = reference_next_token(logits[row], generated[row], params[row], plain[row])
            if margin > 1e-6:
                assert tokens[row] == token, (row, params[row])
                compared += 1
    return compared


@KINDS
@pytest.mark.parametrize("vocab", [2, 7, 300, 5000])
@pytest.mark.parametrize("rules", [{"top_k": 5}, {"top_p": 0.9}, {"min_p": 0.05, "top_p": 0.999}, {}])
def test_nearly_every_draw_is_compared(kind, vocab, rules):
    """Logits without ties: the draws near an edge, left out above, are few."""
    values = np.random.default_rng(vocab)
    logits = values.standard_normal((4, vocab)).astype(np.float32) * 2
    params = [SamplingParams(temperature=0.5 * (1 + row), presence_penalty=0.2, **rules) for row in range(4)]
    generated = [values.integers(0, vocab, 5).tolist() for _ in range(4)]
    served = [np.random.default_rng([vocab, row]) for row in range(4)]
    plain = [np.random.default_rng([vocab, row]) for row in range(4)]
    assert compared_draws(kind, logits, generated, params, served, plain) >= 38  # of 40


@KINDS
def test_a_rows_token_does_not_depend_on_the_other_rows_and_is_the_references(kind):
    """At Marian's vocabulary, flat logits: top_p's nucleus is thousands of tokens wide (the binned search),
    top_k 50's candidates a few groups."""
    values = np.random.default_rng(3)
    logits = values.standard_normal((6, 58101)).astype(np.float32) * 3
    params = [
        SamplingParams(temperature=0.8),
        SamplingParams(temperature=0.8, top_p=0.9),
        SamplingParams(temperature=1.0, top_k=50, top_p=0.9, repetition_penalty=1.2),
        SamplingParams(temperature=1.2, min_p=0.1),
        SamplingParams(temperature=0.7, top_k=3),
        SamplingParams(temperature=1.0, frequency_penalty=1.0),
    ]
    generated = [list(range(30))] * 6
    together = sample_rows(kind, logits.copy(), generated, params, [np.random.default_rng(i) for i in range(6)])
    alone = [
        sample_rows(
            kind, logits[i : i + 1].copy(), generated[i : i + 1], params[i : i + 1], [np.random.default_rng(i)]
        )[0]
        for i in range(6)
    ]
    assert together.tolist() == alone
    plain = [reference_next_token(logits[i], generated[i], params[i], np.random.default_rng(i)) for i in range(6)]
    assert [token for token, margin in plain if margin > 1e-6] == [
        t for t, (_, margin) in zip(alone, plain) if margin > 1e-6
    ]
    assert sum(margin > 1e-6 for _, margin in plain) >= 5


@KINDS
@given(seed=st.integers(0, 2**32 - 1))
def test_the_same_seed_gives_the_same_tokens(kind, seed):
    params = [SamplingParams(temperature=0.9, top_k=3, top_p=0.9)] * 20
    rows = np.repeat(LOGITS[None], 20, axis=0)
    first = sample_rows(kind, rows.copy(), [[]] * 20, params, [np.random.default_rng([seed, i]) for i in range(20)])
    second = sample_rows(kind, rows.copy(), [[]] * 20, params, [np.random.default_rng([seed, i]) for i in range(20)])
    assert first.tolist() == second.tolist()

"""The no-repeat n-gram and minimum-length rules (service/engine/repetition_rules.py) rule out exactly the
tokens transformers' NoRepeatNGramLogitsProcessor and MinLengthLogitsProcessor rule out, on drawn
token sequences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from service.engine.repetition_rules import repetition_rules

transformers = pytest.importorskip("transformers")

VOCAB, START, EOS = 12, 2, 2  # a small vocabulary, so that n-grams repeat; BART starts from its eos


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.integers(0, VOCAB - 1), max_size=30),
    n=st.integers(0, 4),
    min_length=st.integers(0, 12),
)
def test_the_rules_rule_out_what_transformers_does(tokens, n, min_length):
    logits = np.random.default_rng(len(tokens)).standard_normal(VOCAB).astype(np.float32)
    expected = torch.from_numpy(logits.copy())[None]
    input_ids = torch.tensor([[START, *tokens]])
    if n:
        expected = transformers.NoRepeatNGramLogitsProcessor(n)(input_ids, expected)
    if min_length:
        expected = transformers.MinLengthLogitsProcessor(min_length, EOS)(input_ids, expected)
    rules = repetition_rules(START, EOS, n, min_length)
    got = logits.copy()
    if rules is not None:
        rules.apply(got, np.asarray(tokens, np.int64))
    assert np.array_equal(np.isinf(got), torch.isinf(expected[0]).numpy()), (tokens, n, min_length)
    assert np.array_equal(got[np.isfinite(got)], logits[np.isfinite(got)])


def test_no_rules_when_the_checkpoint_asks_for_none():
    assert repetition_rules(START, EOS, 0, 0) is None and repetition_rules(START, EOS, 0, 1) is None
    assert repetition_rules(START, EOS, 3, 0).no_repeat_ngram_size == 3

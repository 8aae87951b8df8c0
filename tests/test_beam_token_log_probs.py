"""Both beam searches keep each token's log-probability beside its token as beams are reordered, so that a
finished hypothesis's tokens' log-probabilities are the ones it was chosen by: they add up to its summed
log-probability, and each is the step's log-probability of that token from that hypothesis's own beam
(hypothesis: any beam width, vocabulary, length and forced first tokens)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from service.engine.beam_search import NEG, BeamSettings, log_softmax
from service.engine.patient_beam_search import beam_search
from service.engine.sequence import GenerationParams

EOS = 0


@given(
    beams=st.integers(1, 4),
    vocab=st.integers(3, 12),
    steps=st.integers(1, 8),
    forced=st.lists(st.integers(1, 2), max_size=2),
    search=st.sampled_from(["transformers", "ctranslate2"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_tokens_log_prob_is_the_one_it_was_chosen_by(beams, vocab, steps, forced, search, seed):
    rng = np.random.default_rng(seed)
    forced = forced if search == "ctranslate2" else []  # transformers' search gets them as logits (token_choice)
    settings = BeamSettings(num_beams=beams, search=search)
    params = GenerationParams(max_new_tokens=steps, beams=settings, forced_tokens=tuple(forced))
    searching = beam_search(params, EOS)
    steps_seen = []  # each step's log-probabilities by beam, and each beam's tokens before it
    while not searching.done:
        log_probs = log_softmax(rng.standard_normal((beams, vocab)).astype(np.float32) * 3)
        # The live beams' (a beam scored NEG is a placeholder, which may share a live one's tokens).
        live = [b for b in range(beams) if searching.running_scores[b] > NEG / 2]
        steps_seen.append({tuple(searching.running[b]): log_probs[b] for b in live})
        searching.step(log_probs)
    for tokens, _, total, token_log_probs in searching.best(beams):
        if total < NEG / 2:  # a placeholder's: no hypothesis a search returns
            continue
        assert len(token_log_probs) == len(tokens)
        assert abs(sum(token_log_probs) - total) < 1e-4 * max(1.0, abs(total))
        for position, (token, log_prob) in enumerate(zip(tokens, token_log_probs)):
            if position < len(forced):
                assert log_prob == 0.0 and token == forced[position]
                continue
            before = tuple(tokens[:position])
            assert log_prob == steps_seen[position][before][token]

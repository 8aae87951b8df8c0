"""The plain form of a sampled row's next token, as the server drew it before its nucleus search: the
reference that tests/test_sampling.py checks the served form against token for token, and the baseline
of benchmarks/sampling_bench.py."""

from __future__ import annotations

import numpy as np

from service.engine.sampling import SamplingParams, penalize_repetition


def reference_next_token(logits, generated, params: SamplingParams, rng) -> int:
    """The plain form: a full stable sort for top_p, and rng.choice over the whole vocabulary."""
    logits = penalize_repetition(logits.astype(np.float64), generated, params.repetition_penalty)
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[0]:
        kth = np.partition(logits, -params.top_k)[-params.top_k]
        logits = np.where(logits >= kth, logits, -np.inf)
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    if params.top_p < 1.0:
        order = np.argsort(-probabilities, kind="stable")
        keep = order[: int(np.searchsorted(np.cumsum(probabilities[order]), params.top_p)) + 1]
        nucleus = np.zeros_like(probabilities)
        nucleus[keep] = probabilities[keep]
        probabilities = nucleus / nucleus.sum()
    return int(rng.choice(probabilities.shape[0], p=probabilities))

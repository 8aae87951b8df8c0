"""The plain form of a sampled row's next token: the rules of service/engine/row_sampling.py written for one
row over the whole vocabulary (a full stable sort for top_p, the cumulative sum over every token in token
order, in float64), with how close the draw came to going another way. tests/test_sampling.py checks the
served form against it token for token, and benchmarks/sampling_bench.py measures against the form the
server had before (one row at a time, float64 over the vocabulary)."""

from __future__ import annotations

import numpy as np

from service.engine.sampling import SamplingParams


def reference_probabilities(logits, generated, params: SamplingParams) -> tuple[np.ndarray, float]:
    """-> each token's probability of being drawn (float64, over the vocabulary), and how far the kept set
    was from another one (the nucleus's cumulative probability from top_p; inf where top_p keeps all)."""
    logits = np.array(logits, np.float32)
    if len(generated) and params.penalizes:
        seen, counts = np.unique(np.asarray(generated), return_counts=True)
        values = logits[seen]
        penalty = np.float32(params.repetition_penalty)
        if params.repetition_penalty != 1.0:
            values = np.where(values > 0, values / penalty, values * penalty)
        counts = counts.astype(np.float32)
        values = values - np.float32(params.frequency_penalty) * counts - np.float32(params.presence_penalty)
        logits[seen] = values
    with np.errstate(over="ignore"):  # a tiny temperature sends the others to -inf
        scaled = (logits - logits.max()) / params.float32_temperature
    keep = np.ones(scaled.shape[0], np.bool_)
    if 0 < params.top_k < scaled.shape[0]:
        keep &= scaled >= np.sort(scaled)[-params.top_k]
    if params.min_p > 0.0:
        keep &= scaled >= np.float32(np.log(params.min_p))
    weights = np.where(keep, np.exp(scaled).astype(np.float64), 0.0)
    margin = np.inf
    if params.top_p < 1.0:
        order = np.argsort(-np.where(keep, scaled, -np.inf), kind="stable")[: int(keep.sum())]
        cumulative = np.cumsum(weights[order]) / weights.sum()
        cut = int(np.searchsorted(cumulative, params.top_p))
        cut = min(cut, order.shape[0] - 1)
        margin = min(abs(cumulative[cut] - params.top_p), abs(cumulative[cut - 1] - params.top_p) if cut else np.inf)
        nucleus = np.zeros_like(weights)
        nucleus[order[: cut + 1]] = weights[order[: cut + 1]]
        weights = nucleus
    return weights / weights.sum(), margin


def reference_next_token(logits, generated, params: SamplingParams, rng) -> tuple[int, float]:
    """-> the token for the generator's next uniform, and the draw's margin: the distance from the uniform
    to the nearest edge of its token's share, or to the kept set's own edge, whichever is nearer."""
    probabilities, margin = reference_probabilities(logits, generated, params)
    cumulative = np.cumsum(probabilities)
    uniform = rng.random()
    token = min(int(np.searchsorted(cumulative, uniform, side="right")), int(np.flatnonzero(probabilities)[-1]))
    low = cumulative[token - 1] if token else 0.0
    return token, min(margin, uniform - low, cumulative[token] - uniform)

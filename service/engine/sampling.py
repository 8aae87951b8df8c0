"""Choosing the next token from logits: greedy, or sampling with temperature, top-k, top-p and a
repetition penalty. Pure functions of their arguments; randomness comes from the caller's generator,
one per sequence, so a seed gives the same tokens whatever else shares the batch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: all tokens
    top_p: float = 1.0  # nucleus: the smallest set of tokens whose probability reaches top_p
    repetition_penalty: float = 1.0  # > 1 discourages tokens already generated


def penalize_repetition(logits: np.ndarray, generated: np.ndarray | list[int], penalty: float) -> np.ndarray:
    """CTRL's penalty (Keskar et al. 2019), as Hugging Face applies it: a seen token's positive logit is
    divided by the penalty, a negative one multiplied."""
    if penalty == 1.0 or len(generated) == 0:
        return logits
    logits = logits.copy()
    seen = np.unique(np.asarray(generated))
    values = logits[seen]
    logits[seen] = np.where(values > 0, values / penalty, values * penalty)
    return logits


# The nucleus is looked for among this many of the most probable tokens first (and all tokens only when
# they do not reach top_p): a stable sort of a 58k vocabulary took 3-7 ms a row, of 256 tokens microseconds.
NUCLEUS_CANDIDATES = 256


def next_token(
    logits: np.ndarray, generated: np.ndarray | list[int], params: SamplingParams, rng: np.random.Generator
) -> int:
    """logits (vocab,) float32 -> a token id. The same token, and the same draw from rng, as
    `rng.choice(vocab, p=probabilities)` over the whole distribution (tests/test_sampling.py), at a
    fraction of its cost: no full sort for top_p, and the draw over the tokens that can be drawn."""
    logits = penalize_repetition(logits.astype(np.float64), generated, params.repetition_penalty)
    if params.temperature == 0.0:
        return int(np.argmax(logits))
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[0]:
        kth = np.partition(logits, -params.top_k)[-params.top_k]
        logits = np.where(logits >= kth, logits, -np.inf)
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    # Generator.choice(p=...) draws one uniform and finds it in the normalised cumulative sums (and first
    # checks p, which took as long as the rest); tokens of probability 0 add nothing to those sums, so
    # leaving them out finds the same token.
    if params.top_p < 1.0:
        tokens = nucleus(probabilities, params.top_p)
        kept = np.zeros_like(probabilities)
        kept[tokens] = probabilities[tokens]
        cumulative = np.cumsum(probabilities[tokens] / kept.sum())  # summed over the vocabulary: same rounding
    else:
        tokens, cumulative = None, np.cumsum(probabilities)
    cumulative /= cumulative[-1]
    index = int(cumulative.searchsorted(rng.random(), side="right"))
    return index if tokens is None else int(tokens[index])


def nucleus(probabilities: np.ndarray, top_p: float) -> np.ndarray:
    """The smallest set of most probable tokens whose probability reaches top_p (ties in token order, as
    a stable sort of the whole vocabulary gives them), in token order."""
    size = probabilities.shape[0]
    floor = 0.0
    if size > NUCLEUS_CANDIDATES:
        floor = np.partition(probabilities, size - NUCLEUS_CANDIDATES)[size - NUCLEUS_CANDIDATES]
    # Every token tied with the floor too; tokens of probability 0 (top_k's cut) come last in any order.
    candidates = np.flatnonzero(probabilities >= floor if floor > 0 else probabilities)
    order = candidates[np.argsort(-probabilities[candidates], kind="stable")]
    cumulative = np.cumsum(probabilities[order])
    cut = int(np.searchsorted(cumulative, top_p))
    if cut >= len(order) and len(order) < size:  # the candidates fall short of top_p: all tokens
        order = np.argsort(-probabilities, kind="stable")
        cut = int(np.searchsorted(np.cumsum(probabilities[order]), top_p))
    return np.sort(order[: cut + 1])

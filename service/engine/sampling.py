"""Choosing the next token from logits: greedy, or sampling with temperature, top-k, top-p and a
repetition penalty. Pure functions of their arguments; randomness comes from the caller's generator,
one per sequence, so a seed gives the same tokens whatever else shares the batch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
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


def next_token(
    logits: np.ndarray, generated: np.ndarray | list[int], params: SamplingParams, rng: np.random.Generator
) -> int:
    """logits (vocab,) float32 -> a token id."""
    logits = penalize_repetition(logits.astype(np.float64), generated, params.repetition_penalty)
    if params.temperature == 0.0:
        return int(np.argmax(logits))
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[0]:
        kth = np.partition(logits, -params.top_k)[-params.top_k]
        logits = np.where(logits >= kth, logits, -np.inf)
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    if params.top_p < 1.0:
        order = np.argsort(-probabilities, kind="stable")
        cumulative = np.cumsum(probabilities[order])
        keep = order[: int(np.searchsorted(cumulative, params.top_p)) + 1]
        nucleus = np.zeros_like(probabilities)
        nucleus[keep] = probabilities[keep]
        probabilities = nucleus / nucleus.sum()
    return int(rng.choice(probabilities.shape[0], p=probabilities))

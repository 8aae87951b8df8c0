"""A sampled sequence's parameters: temperature, top-k, top-p, min-p and the repetition, frequency and
presence penalties (row_sampling.py draws the tokens). Randomness comes from the sequence's own generator,
so a seed gives the same tokens whatever else shares the batch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The samplers divide float32 logits by the temperature in float32. A client's temperature may be any
# positive float (JSON's 1e-197, say), which float32 makes 0 (or a denormal a device may flush to 0): every
# logit -inf or NaN, and the decode step failed for every sequence in it. One beyond float32's largest makes
# it inf, and a token a logit rule masked (-inf) NaN. Kept within float32's normal range, a temperature keeps
# its meaning: the limit, the most probable tokens only, or every token alike.
FLOAT32_TEMPERATURES = (float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max))


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: all tokens
    top_p: float = 1.0  # nucleus: the smallest set of tokens whose probability reaches top_p
    min_p: float = 0.0  # tokens at least min_p times as probable as the most probable one
    repetition_penalty: float = 1.0  # > 1 discourages tokens already generated (CTRL's, as transformers)
    frequency_penalty: float = 0.0  # OpenAI's: minus this for each time a token was generated
    presence_penalty: float = 0.0  # OpenAI's: minus this once for a token generated at all

    @property
    def penalizes(self) -> bool:
        return self.repetition_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0

    @property
    def float32_temperature(self) -> np.float32:
        """The temperature the samplers divide by, within float32's normal range (FLOAT32_TEMPERATURES)."""
        low, high = FLOAT32_TEMPERATURES
        return np.float32(min(max(self.temperature, low), high))

"""A sampled sequence's parameters: temperature, top-k, top-p, min-p and the repetition, frequency and
presence penalties (row_sampling.py draws the tokens). Randomness comes from the sequence's own generator,
so a seed gives the same tokens whatever else shares the batch."""

from __future__ import annotations

from dataclasses import dataclass


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

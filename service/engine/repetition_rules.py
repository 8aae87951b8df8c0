"""transformers' no_repeat_ngram_size and min_length as logit rules (logit_rules.py), which a sequence
carries when its checkpoint's generation config sets them (bart-large-cnn: 3 and 56). A beam search
applies them to its log-probabilities after the log-softmax, as transformers' logits processors run in
`_beam_search`, so that the scores are transformers' too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


@dataclass(frozen=True)
class RepetitionRules:
    start_id: int  # the decoder's start token: transformers' input_ids begin with it
    eos_id: int
    no_repeat_ngram_size: int = 0  # no n-gram of this size twice (0: any)
    min_length: int = 0  # eos ruled out while the decoder's inputs, the start token included, are fewer

    on_log_probs: ClassVar[bool] = True  # beam search: after the log-softmax (token_choice.py)

    def apply(self, logits: np.ndarray, tokens: np.ndarray) -> None:
        length = 1 + len(tokens)  # transformers' cur_len: the start token and the tokens so far
        if length < self.min_length:
            logits[self.eos_id] = -np.inf
        n = self.no_repeat_ngram_size
        if n and length >= n:  # at least one n-gram so far
            inputs = np.concatenate([[self.start_id], np.asarray(tokens, np.int64)])
            ngrams = sliding_window_view(inputs, n)
            prefix = inputs[len(inputs) - n + 1 :]  # the n - 1 tokens the next one would follow
            seen = (ngrams[:, :-1] == prefix).all(axis=1)
            logits[ngrams[seen, -1]] = -np.inf


def repetition_rules(start_id: int, eos_id: int, no_repeat_ngram_size: int, min_length: int) -> RepetitionRules | None:
    """The rules a checkpoint's settings ask for; None where they ask for none."""
    if no_repeat_ngram_size <= 0 and min_length <= 1:
        return None
    return RepetitionRules(start_id, eos_id, max(no_repeat_ngram_size, 0), min_length)

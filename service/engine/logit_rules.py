"""What a model family's own rules over a step's logits look like to the engine (Whisper's timestamp rules,
service/core/transcription/): an object a sequence carries in its parameters, which the token choice hands
each step's logits of each of the sequence's rows before it chooses. Whisper's rules see a beam search's
logits before the log-softmax, as openai-whisper applies them; rules with `on_log_probs` (transformers'
processors: repetition_rules.py) see its log-probabilities after it, as transformers applies them. In a
split server the engine runs a copy of the object; what the copy reads comes back into the caller's when
the sequence ends (split/remote_models.py)."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class LogitRules(Protocol):
    def apply(self, logits: np.ndarray, tokens: np.ndarray) -> None:
        """logits (vocab,) float32: one row's logits as the model gave them, changed in place (a token
        ruled out: -inf). tokens: the row's tokens so far (its forced tokens first), whose next these
        logits choose. Called at every step, a forced token's too, so that the rules may read what the
        model says there (Whisper's no-speech probability); the engine leaves out the checkpoint's
        suppressed tokens afterwards."""

"""Whisper's rules over each step's logits, as OpenAI's decoding.py and CTranslate2 apply them to a window:
the no-speech probability read where the decoder sees <|startoftranscript|>, a blank or the end not
generated first, the suppressed tokens, and the timestamp rules (timestamps in pairs, never decreasing,
the first at most max_initial_timestamp, and a timestamp forced where the timestamps' summed probability
beats the most likely text token). One object per window's sequence (engine/logit_rules.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from modeldir.whisper_tokens import WhisperSettings

from ...engine.beam_search import log_softmax

MAX_INITIAL_TIMESTAMP = 1.0  # seconds: OpenAI's default, and faster-whisper's


@dataclass(eq=False)
class WhisperRules:
    settings: WhisperSettings
    sample_begin: int  # the forced tokens' count: the tokens from here on are the model's own
    sot_index: int  # the position of <|startoftranscript|> among the decoder's inputs (0 without a previous text)
    timestamps: bool  # the prompt asks for timestamps (it has no <|notimestamps|>)
    suppress_blank: bool = True  # the checkpoint's begin-suppressed tokens (a blank, the end) not generated first
    max_initial_timestamp_index: int | None = round(MAX_INITIAL_TIMESTAMP / 0.02)
    no_speech_prob: float | None = field(default=None, init=False)  # read at the <|startoftranscript|> step

    def __post_init__(self) -> None:
        # Index arrays made once: a window's rules run at each of its steps.
        self.never = np.asarray(self.settings.never_generated_ids, np.int64)
        self.begin_suppressed = np.asarray(self.settings.begin_suppress_ids, np.int64)

    def apply(self, logits: np.ndarray, tokens: np.ndarray) -> None:
        s = self.settings
        # tokens holds the decoder's inputs but its first (the start token); the step reads tokens[-1].
        if len(tokens) == self.sot_index and s.no_speech_id < logits.shape[0]:
            probabilities = np.exp(log_softmax(logits))
            self.no_speech_prob = float(probabilities[s.no_speech_id])
        if len(tokens) < self.sample_begin:
            return  # a forced token comes next: nothing to rule
        if self.suppress_blank and len(tokens) == self.sample_begin:
            logits[self.begin_suppressed] = -np.inf
        logits[self.never] = -np.inf
        if self.timestamps:
            self._timestamp_rules(logits, tokens[self.sample_begin :])

    def _timestamp_rules(self, logits: np.ndarray, sampled: np.ndarray) -> None:
        s = self.settings
        begin = s.timestamp_begin_id
        logits[s.no_timestamps_id] = -np.inf
        last_was_timestamp = len(sampled) >= 1 and sampled[-1] >= begin
        penultimate_was_timestamp = len(sampled) < 2 or sampled[-2] >= begin
        if last_was_timestamp:
            if penultimate_was_timestamp:  # a pair just closed: text next
                logits[begin:] = -np.inf
            else:  # a timestamp opened: another, or the end
                logits[: s.end_of_text_id] = -np.inf
        stamps = sampled[sampled >= begin]
        if stamps.size:  # never decreasing; a segment is never empty
            last = stamps[-1] if last_was_timestamp and not penultimate_was_timestamp else stamps[-1] + 1
            logits[begin:last] = -np.inf
        if len(sampled) == 0:  # the first token is a timestamp, at most max_initial_timestamp
            logits[:begin] = -np.inf
            if self.max_initial_timestamp_index is not None:
                logits[begin + self.max_initial_timestamp_index + 1 :] = -np.inf
        log_probs = log_softmax(logits)
        timestamp_log_prob = np.logaddexp.reduce(log_probs[begin:])
        if timestamp_log_prob > log_probs[:begin].max():
            logits[:begin] = -np.inf

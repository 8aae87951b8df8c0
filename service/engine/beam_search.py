"""Beam search over one sequence's beams, step by step, as Hugging Face transformers defines it (its
`_beam_search`, v4.50+), so that a checkpoint gives the same output here as with `generate(num_beams=k)`.

Each step takes the beams' log-probabilities, keeps the 2k best continuations of all beams, lets the
best k that do not end (eos, or the length limit) run on, and files the ones among the first k that end
as finished hypotheses, scored sum(log p) / generated_length ** length_penalty; k finished are kept.
When to stop (early_stopping): "true", as soon as k hypotheses are finished; "false", also when the best
running beam, scored at its current length, cannot beat the worst finished one; "never", the same but
scored at the longest length when length_penalty > 0. Arithmetic in float32, as there.

Pure numpy and no model: the scheduler feeds it each step's log-probabilities and moves the cache rows
after the parents it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NEG = np.float32(-1.0e9)  # transformers' "impossible" score


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise, float32. (k, vocab)"""
    logits = logits.astype(np.float32, copy=False)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def top(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values, largest first; ties go to the lower index."""
    if k < values.shape[0]:
        candidates = np.argpartition(-values, k - 1)[:k]
        threshold = values[candidates].min()
        candidates = np.flatnonzero(values >= threshold)  # every tie at the threshold competes by index
    else:
        candidates = np.arange(values.shape[0])
    order = np.lexsort((candidates, -values[candidates]))
    return candidates[order][:k]


@dataclass(frozen=True, kw_only=True)
class BeamSettings:
    num_beams: int
    length_penalty: float = 1.0
    early_stopping: str = "false"  # "true" | "false" | "never"
    num_return_sequences: int = 1  # the n best hypotheses to return, n <= num_beams
    # "transformers": this search; "ctranslate2": CTranslate2's, which stops after round(num_beams x
    # patience) finished hypotheses (patient_beam_search.py: Whisper's, as faster-whisper runs it).
    search: str = "transformers"
    patience: float = 1.0


class Beams:
    """What every beam search holds while it runs: k beams, only the first live at the start (so that the
    first step does not pick one token k times), each with its tokens so far and its summed score."""

    def __init__(self, settings: BeamSettings, eos_id: int):
        k = self.k = settings.num_beams
        self.settings, self.eos_id = settings, eos_id
        self.length = 1  # tokens so far in every running beam, the start token included
        self.running_scores = np.full(k, NEG, np.float32)
        self.running_scores[0] = 0.0
        self.running: list[list[int]] = [[] for _ in range(k)]  # generated tokens per running beam
        self.running_log_probs: list[list[float]] = [[] for _ in range(k)]  # each of their tokens'
        self.done = False

    @property
    def last_tokens(self) -> list[int | None]:
        """Each running beam's last token (None before the first step: the start token)."""
        return [beam[-1] if beam else None for beam in self.running]

    def tokens(self, beam: int) -> np.ndarray:
        """A running beam's tokens so far (the start token not among them)."""
        return np.asarray(self.running[beam], np.int64)


class BeamSearch(Beams):
    def __init__(self, settings: BeamSettings, eos_id: int, max_steps: int):
        super().__init__(settings, eos_id)
        k = self.k
        self.max_length = 1 + max_steps  # the decoder's start token counts, as in transformers
        self.finished_scores = np.full(k, NEG, np.float32)
        self.finished: list[list[int]] = [[] for _ in range(k)]
        self.finished_log_probs: list[list[float]] = [[] for _ in range(k)]
        self.is_finished = np.zeros(k, bool)
        self.can_improve = True

    def _penalized(self, scores: np.ndarray, length: int) -> np.ndarray:
        return scores / np.float32(length**self.settings.length_penalty)

    def step(self, log_probs: np.ndarray) -> np.ndarray:
        """log_probs (k, vocab) of the running beams, processed (suppressed tokens at -inf). -> the parent
        (index of the old running beam) of each new running beam."""
        k, vocab = log_probs.shape
        early = self.settings.early_stopping
        scores = (log_probs.astype(np.float32) + self.running_scores[:, None]).reshape(-1)
        chosen = top(scores, 2 * k)
        chosen_scores = scores[chosen]
        parents, tokens = chosen // vocab, chosen % vocab
        token_log_probs = log_probs[parents, tokens].astype(np.float32).tolist()
        ends = (tokens == self.eos_id) | (self.length + 1 >= self.max_length)

        # The k best that go on.
        going_scores = chosen_scores + ends.astype(np.float32) * NEG
        going = top(going_scores, k)

        # Hypotheses that end among the first k join the finished ones if they beat them.
        candidates = self._penalized(chosen_scores, self.length + 1 - 1)
        if self.is_finished.all() and early == "true":
            candidates = candidates + NEG
        if not self.can_improve:
            candidates = candidates + NEG
        just_finished = ends & (np.arange(2 * k) < k)
        candidates = candidates + (~just_finished).astype(np.float32) * NEG
        merged_scores = np.concatenate([self.finished_scores, candidates])
        merged = [*self.finished, *(self.running[p] + [t] for p, t in zip(parents.tolist(), tokens.tolist()))]
        merged_log_probs = [
            *self.finished_log_probs,
            *(self.running_log_probs[p] + [lp] for p, lp in zip(parents.tolist(), token_log_probs)),
        ]
        merged_flags = np.concatenate([self.is_finished, just_finished])
        keep = top(merged_scores, k)
        self.finished_scores, self.is_finished = merged_scores[keep], merged_flags[keep]
        self.finished = [merged[i] for i in keep]
        self.finished_log_probs = [merged_log_probs[i] for i in keep]

        self.running_scores = going_scores[going]
        self.running = [self.running[parents[i]] + [int(tokens[i])] for i in going]
        self.running_log_probs = [self.running_log_probs[parents[i]] + [token_log_probs[i]] for i in going]
        self.length += 1

        if early == "never" and self.settings.length_penalty > 0.0:
            best_length = self.max_length - 1
        else:
            best_length = self.length - 1
        best_possible = self._penalized(self.running_scores[:1], best_length)[0]
        worst_finished = np.where(self.is_finished, self.finished_scores.min(), NEG)
        self.can_improve = self.can_improve and bool((best_possible > worst_finished).any())
        self.done = (not self.can_improve) or (self.is_finished.all() and early == "true") or bool(ends.all())
        return parents[going]

    def best(self, n: int = 1) -> list[tuple[list[int], float, float, list[float]]]:
        """The n best finished hypotheses, best first: their tokens (eos included when one ended so),
        scores, summed log-probabilities and each token's. Once done, all k are finished."""
        penalty = self.settings.length_penalty
        found = [(list(self.finished[i]), float(self.finished_scores[i]), self.finished_log_probs[i]) for i in range(n)]
        return [(tokens, score, score * len(tokens) ** penalty, lps) for tokens, score, lps in found]

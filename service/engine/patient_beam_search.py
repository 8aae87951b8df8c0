"""Beam search as CTranslate2 runs it (decoding.cc BeamSearch), so that Whisper's windows give here what
faster-whisper gives: each step keeps the 2k best continuations of all beams; a continuation among the
first k that ends (eos, or the last step) is filed as a finished hypothesis, its place taken by the next
one among the second k that does not end; the search stops once round(k x patience) hypotheses are filed
or at the last step, and they are ranked by sum(log p) / tokens ** length_penalty (eos not counted).

Forced tokens (Whisper's prompt) are fed before the search proper, to every beam alike: they are not the
model's choice, and neither scored nor counted in a hypothesis's length."""

from __future__ import annotations

import numpy as np

from .beam_search import NEG, Beams, BeamSearch, BeamSettings, top
from .sequence import GenerationParams


class PatientBeamSearch(Beams):
    def __init__(self, settings: BeamSettings, eos_id: int, max_steps: int, forced: tuple[int, ...] = ()):
        super().__init__(settings, eos_id)  # each beam's tokens hold the forced ones first
        self.forced = list(forced)
        self.search_steps = max_steps - len(forced)  # the search's own steps, the eos step included
        self.wanted = round(self.k * settings.patience)
        # (tokens, ended by eos, summed log p, each token's log p: the forced ones' 0)
        self.finished: list[tuple[list[int], bool, float, list[float]]] = []

    def step(self, log_probs: np.ndarray) -> np.ndarray:
        """log_probs (k, vocab) of the beams, processed. -> the parent of each new beam."""
        k = self.k
        if self.length <= len(self.forced):  # a forced token, whatever the model says
            token = self.forced[self.length - 1]
            self.running = [beam + [token] for beam in self.running]
            self.running_log_probs = [beam + [0.0] for beam in self.running_log_probs]
            self.length += 1
            return np.arange(k)
        vocab = log_probs.shape[1]
        scores = (log_probs.astype(np.float32) + self.running_scores[:, None]).reshape(-1)
        chosen = top(scores, 2 * k)
        chosen_scores, parents, tokens = scores[chosen], chosen // vocab, chosen % vocab
        token_log_probs = log_probs[parents, tokens].astype(np.float32).tolist()
        last = self.length - len(self.forced) == self.search_steps
        ends = (tokens == self.eos_id) | last
        going, spare = [], k
        for slot in range(k):
            pick = slot
            if ends[slot]:
                parent, token = int(parents[slot]), int(tokens[slot])
                ended = token == self.eos_id
                hypothesis = self.running[parent] + ([] if ended else [token])
                log_probs_so_far = self.running_log_probs[parent] + [token_log_probs[slot]]  # eos's too
                self.finished.append((hypothesis, ended, float(chosen_scores[slot]), log_probs_so_far))
                while spare < 2 * k and tokens[spare] == self.eos_id:
                    spare += 1
                pick = spare if spare < 2 * k else None
                spare += 1
            going.append(pick)
        self.running_scores = np.array([NEG if i is None else chosen_scores[i] for i in going], np.float32)
        self.running = [self.running[parents[i or 0]] + [int(tokens[i or 0])] for i in going]
        self.running_log_probs = [self.running_log_probs[parents[i or 0]] + [token_log_probs[i or 0]] for i in going]
        self.length += 1
        self.done = bool(last) or len(self.finished) >= self.wanted
        return np.array([parents[i or 0] for i in going])

    def best(self, n: int = 1) -> list[tuple[list[int], float, float, list[float]]]:
        """The n best finished hypotheses, best first: their tokens (the forced ones first, eos last where
        one ended so), score (sum(log p) / the model's tokens ** length_penalty), summed log p and each
        token's."""
        penalty = self.settings.length_penalty
        ranked = []
        for tokens, ended, total, log_probs in self.finished:
            length = max(len(tokens) - len(self.forced), 1)
            ranked.append((tokens + [self.eos_id] * ended, total / length**penalty, total, log_probs))
        ranked.sort(key=lambda hypothesis: -hypothesis[1])
        return ranked[:n]


def beam_search(params: GenerationParams, eos_id: int) -> BeamSearch | PatientBeamSearch:
    """The search a sequence's beam settings name: transformers' or CTranslate2's."""
    if params.beams.search == "ctranslate2":
        return PatientBeamSearch(params.beams, eos_id, params.max_steps, params.forced_tokens)
    return BeamSearch(params.beams, eos_id, params.max_steps)

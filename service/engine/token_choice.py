"""Each row's next token after a decode step, under the checkpoint's generation rules: greedy rows by one
argmax, sampled rows by their own generator, beam searches by a step of their search.

The rules are transformers' (bad_words_ids of one token: never generated; forced_eos_token_id: eos at
the last position a request allows; renormalize_logits), read from the checkpoint once by the loader.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .beam_search import log_softmax
from .rows import BEAM, GREEDY, SAMPLED, RowState
from .sampling import next_token
from .sequence import Sequence
from .steps import BEAM_ROW


@dataclass(frozen=True)
class GenerationRules:
    eos_id: int
    suppressed_ids: tuple[int, ...] = ()  # never generated
    forced_eos: bool = False  # eos at the last position a request allows
    renormalize_logits: bool = False  # beam search: log-softmax again after the rules


class TokenChoice:
    """Over a decode step's output (runner/seq2seq.py StepOutput): next_tokens, every row's argmax with
    the suppressed tokens left out, computed on the device; and the whole logits of the rows that asked."""

    def __init__(self, rules: GenerationRules):
        self.rules = rules
        self.eos_id = rules.eos_id
        self.suppressed_ids = np.asarray(rules.suppressed_ids, dtype=np.int64)

    def forced_eos_at(self, sequence: Sequence, generated: int) -> bool:
        """Whether the checkpoint forces eos after `generated` tokens: at the last position allowed."""
        params = sequence.params
        return self.rules.forced_eos and not params.ignore_eos and generated == params.max_new_tokens - 1

    @staticmethod
    def logit_rows(rows: RowState, count: int) -> list[int]:
        """The rows whose token needs their whole logits: beam search and sampling do, greedy rows not."""
        return [] if rows.all_greedy else (rows.kind[:count] != GREEDY).nonzero()[0].tolist()

    def choose(self, step, rows: RowState, holders: list) -> np.ndarray:
        """The next token of each greedy or sampled row (BEAM_ROW for beam rows), over the step's rows at
        once; holders in row order (a sampled row's generator is its sequence's)."""
        count = len(holders)
        if rows.all_greedy and not self.rules.forced_eos:
            return step.next_tokens[:count]  # the device's argmax, as it is
        kind = rows.kind[:count]
        tokens = np.array(step.next_tokens[:count], np.int64)
        forced = rows.forced_eos[:count] & (rows.count[:count] == rows.max_new[:count] - 1) & (kind != BEAM)
        sampled = np.flatnonzero((kind == SAMPLED) & ~forced).tolist()
        if sampled:
            logits = step.row_logits(sampled)
            logits[:, self.suppressed_ids] = -np.inf
            for i, row_logits in zip(sampled, logits):
                sequence = holders[i]
                tokens[i] = next_token(row_logits, rows.generated(i), sequence.params.sampling, sequence.rng)
        tokens[forced] = self.eos_id
        tokens[kind == BEAM] = BEAM_ROW
        return tokens

    def beam_step(self, sequence: Sequence, step) -> list[int] | None:
        """One step of a beam search over its beams' rows of logits. -> the parent (old beam) of each new
        beam, or None when the search is done."""
        search = sequence.search
        log_probs = log_softmax(step.row_logits([holder.row for holder in sequence.beam_rows]))
        log_probs[:, self.suppressed_ids] = -np.inf
        if self.forced_eos_at(sequence, search.length - 1):
            log_probs[:] = -np.inf
            log_probs[:, self.eos_id] = 0.0
        if self.rules.renormalize_logits:
            log_probs = log_softmax(log_probs)
        parents = search.step(log_probs)
        return None if search.done else parents.tolist()

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
from .sequence import EOS, LENGTH, Hypothesis, Sequence
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
        return self.rules.forced_eos and not params.ignore_eos and generated == params.max_steps - 1

    @staticmethod
    def logit_rows(rows: RowState, count: int) -> list[int]:
        """The rows whose token needs their whole logits: beam search, sampling and scored rows do, plain
        greedy rows not."""
        if rows.all_greedy and not rows.scoring:
            return []
        wanted = rows.kind[:count] != GREEDY
        if rows.scoring:
            wanted |= rows.scored[:count]
        return wanted.nonzero()[0].tolist()

    def choose(self, step, rows: RowState, holders: list) -> np.ndarray:
        """The next token of each greedy or sampled row (BEAM_ROW for beam rows), over the step's rows at
        once; holders in row order (a sampled row's generator is its sequence's)."""
        count = len(holders)
        first = rows.forced_now(count)
        if rows.all_greedy and not self.rules.forced_eos and first is None and not rows.scoring:
            return step.next_tokens[:count]  # the device's argmax, as it is
        kind = rows.kind[:count]
        tokens = np.array(step.next_tokens[:count], np.int64)
        forced = rows.forced_eos[:count] & (rows.count[:count] == rows.max_steps[:count] - 1) & (kind != BEAM)
        sampled_rows = kind == SAMPLED
        if first is not None:  # the forced first token (a target language's code), whatever the logits say
            tokens[first] = rows.forced_first[:count][first]
            sampled_rows &= ~first
        sampled = np.flatnonzero(sampled_rows & ~forced).tolist()
        if sampled:
            logits = step.row_logits(sampled)
            logits[:, self.suppressed_ids] = -np.inf
            for i, row_logits in zip(sampled, logits):
                sequence = holders[i]
                tokens[i] = next_token(row_logits, rows.generated(i), sequence.params.sampling, sequence.rng)
        tokens[forced] = self.eos_id
        if rows.scoring:
            self._score(step, rows, tokens, count, first)
        tokens[kind == BEAM] = BEAM_ROW
        return tokens

    def _score(self, step, rows: RowState, tokens: np.ndarray, count: int, first: np.ndarray | None) -> None:
        """Each scored row's chosen token's log-probability, under the distribution it was chosen from
        (suppressed tokens left out), into the row's sum; a forced first token is not the model's choice."""
        scored = rows.scored[:count] if first is None else rows.scored[:count] & ~first
        where = np.flatnonzero(scored)
        if not where.size:
            return
        logits = step.row_logits(where.tolist()).astype(np.float32)
        logits[:, self.suppressed_ids] = -np.inf
        log_probs = log_softmax(logits)[np.arange(where.size), tokens[where]]
        rows.log_prob[where] += log_probs
        rows.scored_tokens[where] += 1

    def beam_step(self, sequence: Sequence, step) -> list[int] | None:
        """One step of a beam search over its beams' rows of logits. -> the parent (old beam) of each new
        beam, or None when the search is done."""
        search = sequence.search
        log_probs = log_softmax(step.row_logits([holder.row for holder in sequence.beam_rows]))
        log_probs[:, self.suppressed_ids] = -np.inf
        first = sequence.params.first_token
        if first is not None and search.length == 1:  # as transformers' forced_bos_token_id
            log_probs[:] = -np.inf
            log_probs[:, first] = 0.0
        elif self.forced_eos_at(sequence, search.length - 1):
            log_probs[:] = -np.inf
            log_probs[:, self.eos_id] = 0.0
        if self.rules.renormalize_logits:
            log_probs = log_softmax(log_probs)
        parents = search.step(log_probs)
        return None if search.done else parents.tolist()

    def hypotheses(self, sequence: Sequence, decode) -> tuple[Hypothesis, ...]:
        """A finished beam search's n best, best first, as its caller gets them: without eos or the forced
        first token, and ended by length where the checkpoint forced eos."""
        found = []
        first = int(sequence.params.first_token is not None)
        penalty = sequence.params.beams.length_penalty
        for tokens, score in sequence.search.best(sequence.params.beams.num_return_sequences):
            ended = bool(tokens) and tokens[-1] == self.eos_id
            forced = ended and self.forced_eos_at(sequence, len(tokens) - 1)
            generated = tokens[first : len(tokens) - ended]
            # The search ranked sum(log p) / len(tokens) ** penalty; the forced first token's log p is 0.
            mean = score * len(tokens) ** penalty / max(len(tokens) - first, 1)
            reason = EOS if ended and not forced else LENGTH
            found.append(Hypothesis(decode(generated), generated, reason, score, mean))
        return tuple(found)

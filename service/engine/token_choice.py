"""Each row's next token after a decode step, under the checkpoint's generation rules: greedy rows by one
argmax, sampled rows by their own generator, beam searches by a step of their search.

The rules are transformers' (bad_words_ids of one token: never generated; forced_eos_token_id: eos at
the last position a request allows; renormalize_logits), read from the checkpoint once by the loader; and
a sequence's own (params.rules: Whisper's timestamp rules), which see each step's logits before the
checkpoint's suppressed tokens are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .beam_search import log_softmax
from .row_sampling import RowSampler, penalized
from .rows import BEAM, GREEDY, SAMPLED, RowState
from .sequence import EOS, LENGTH, Hypothesis, Sequence, owner
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

    def __init__(self, rules: GenerationRules, device_sampler=None):
        """device_sampler: the model's sampling graph on its device (runner/sampling_graph.py), which draws
        the sampled rows of a step whose logits stay there; None: every row is drawn on the host."""
        self.rules = rules
        self.eos_id = rules.eos_id
        self.suppressed_ids = np.asarray(rules.suppressed_ids, dtype=np.int64)
        self.sampler = RowSampler()
        self.device_sampler = device_sampler

    def forced_eos_at(self, sequence: Sequence, generated: int) -> bool:
        """Whether the checkpoint forces eos after `generated` tokens: at the last position allowed."""
        params = sequence.params
        return self.rules.forced_eos and not params.ignore_eos and generated == params.max_steps - 1

    @staticmethod
    def logit_rows(rows: RowState, count: int) -> list[int]:
        """The rows whose token needs their whole logits: beam search, sampling, scored and ruled rows do,
        plain greedy rows not."""
        if rows.all_greedy and not rows.scoring and not rows.ruling:
            return []
        wanted = rows.kind[:count] != GREEDY
        if rows.scoring:
            wanted |= rows.scored[:count]
        if rows.ruling:
            wanted |= rows.ruled[:count]
        return wanted.nonzero()[0].tolist()

    def samples_on_device(self, rows: RowState, holders: list, logit_rows: list[int]) -> bool:
        """Whether a step's logits may stay on the device: there is a sampling graph, and every row that
        needs its logits is a sampled row of a temperature above 0, with no rules and no scores."""
        if self.device_sampler is None or not logit_rows or rows.scoring or rows.ruling:
            return False
        kind = rows.kind
        return all(kind[i] == SAMPLED and holders[i].params.sampling.temperature > 0 for i in logit_rows)

    def processed(self, step, rows: list[int], holders: list, tokens_of, failures: dict | None = None) -> np.ndarray:
        """The logits of some rows (float32, a copy) through their sequences' rules, where they have any,
        then with the suppressed tokens left out. tokens_of(i): row i's tokens so far, the forced ones
        included, as its rules read them. failures: as choose's (None: a rule's error is raised)."""
        # row_logits gives a new array (its rows picked by index): no second copy where it is float32 already
        logits = np.asarray(step.row_logits(rows), np.float32)
        for i, row_logits in zip(rows, logits):
            rules = owner(holders[i]).params.rules
            if rules is None:
                continue
            try:
                rules.apply(row_logits, tokens_of(i))
            except Exception as error:
                if failures is None:
                    raise
                failures[i] = error
        logits[:, self.suppressed_ids] = -np.inf
        return logits

    def choose(self, step, rows: RowState, holders: list, failures: dict[int, Exception]) -> np.ndarray:
        """The next token of each greedy or sampled row (BEAM_ROW for beam rows), over the step's rows at
        once; holders in row order (a sampled row's generator is its sequence's). A row whose own rules or
        sampling on the host raise has its first error in failures (by row): its sequence fails, not the
        step. (The sampling graph's draw is every row's: its failure is the step's.)"""
        count = len(holders)
        forcing = rows.forced_now(count)
        if rows.all_greedy and not self.rules.forced_eos and forcing is None and not rows.scoring and not rows.ruling:
            return step.next_tokens[:count]  # the device's argmax, as it is
        kind = rows.kind[:count]
        tokens = np.array(step.next_tokens[:count], np.int64)
        at_limit = rows.forced_eos[:count] & (rows.count[:count] == rows.max_steps[:count] - 1) & (kind != BEAM)
        free = ~at_limit if forcing is None else ~at_limit & ~forcing  # rows whose token the model chooses
        ruled = rows.ruled[:count] if rows.ruling else np.zeros(count, np.bool_)
        scored = rows.scored[:count] & free if rows.scoring else np.zeros(count, np.bool_)
        # Ruled rows' logits go through their rules at every step, forced ones too: the rules may read them.
        wanted = np.flatnonzero(((kind == SAMPLED) & free) | ruled | scored).tolist()
        if step.device_logits is not None:  # every logit row samples (samples_on_device)
            self._sampled_on_device(tokens, step, holders, rows, free)
        elif wanted:
            logits = self.processed(step, wanted, holders, rows.generated, failures)
            if rows.scoring:  # scored before the penalties change the sampled rows' logits in place
                scored_logits = {i: logits[n].copy() for n, i in enumerate(wanted) if scored[i]}
            self._sampled(tokens, logits, wanted, holders, rows, free & (kind == SAMPLED), failures=failures)
            for n, i in enumerate(wanted):
                if free[i] and kind[i] != SAMPLED and ruled[i]:
                    tokens[i] = int(logits[n].argmax())
            if failures:  # a token of the vocabulary for the scores to read (never reported: the row leaves)
                tokens[list(failures)] = self.eos_id
            if rows.scoring:
                self._score(rows, tokens, scored_logits, np.flatnonzero(scored))
        if forcing is not None:  # the forced tokens, whatever the logits say
            tokens[forcing] = rows.forced_tokens_now(forcing)
        tokens[at_limit] = self.eos_id
        tokens[kind == BEAM] = BEAM_ROW
        return tokens

    def _sampled(
        self, tokens, logits: np.ndarray, wanted: list[int], holders: list, rows, sampled, *, failures
    ) -> None:
        """The sampled rows' tokens, all at once (row_sampling.py); a row of temperature 0 with a penalty is
        the argmax of its penalized logits. A row that raises: its error into failures, by row."""
        drawn, penalized_greedy = [], []
        for n, i in enumerate(wanted):
            if sampled[i]:
                params = holders[i].params.sampling
                (drawn if params.temperature > 0 else penalized_greedy).append((n, i))
        for n, i in penalized_greedy:
            try:
                penalized(logits[n], rows.generated(i), holders[i].params.sampling)
            except Exception as error:
                failures.setdefault(i, error)  # its rules' error, where they raised first
            tokens[i] = int(logits[n].argmax())
        if drawn:
            at, failed = [n for n, _ in drawn], {}
            # logits is this step's own copy: the rows are drawn from it in place where they are all of it
            chosen = self.sampler.sample(
                logits if len(at) == logits.shape[0] else logits[at],
                [rows.generated(i) for _, i in drawn],
                [holders[i].params.sampling for _, i in drawn],
                [holders[i].rng for _, i in drawn],
                failed,
            )
            tokens[[i for _, i in drawn]] = chosen
            for k, error in failed.items():
                failures.setdefault(drawn[k][1], error)  # its rules' error, where they raised first

    def _sampled_on_device(self, tokens: np.ndarray, step, holders: list, rows: RowState, free: np.ndarray) -> None:
        """The sampled rows' tokens from the logits left on the device, drawn by the sampling graph: one
        uniform from each free row's generator, as on the host (a forced row's draw is not taken)."""
        at = np.asarray(step.logit_rows, np.int64)
        drawn = free[at]
        uniforms = np.array([holders[i].rng.random() if free[i] else 0.0 for i in at.tolist()], np.float64)
        chosen = self.device_sampler.draw(
            step.device_logits,
            [rows.generated(i) for i in at.tolist()],
            [holders[i].params.sampling for i in at.tolist()],
            uniforms,
        )
        tokens[at[drawn]] = chosen[drawn]

    @staticmethod
    def _score(rows: RowState, tokens: np.ndarray, logits: dict[int, np.ndarray], scored: np.ndarray) -> None:
        """Each scored row's chosen token's log-probability, under the distribution it was chosen from
        (processed: rules applied, suppressed tokens left out), into the row's sum; a forced token is not
        the model's choice."""
        if not scored.size:
            return
        log_probs = log_softmax(np.stack([logits[i] for i in scored.tolist()]))[np.arange(scored.size), tokens[scored]]
        rows.log_prob[scored] += log_probs
        rows.token_log_prob[scored, rows.count[scored]] = log_probs  # where the token goes
        rows.scored_tokens[scored] += 1

    def beam_step(self, sequence: Sequence, step) -> list[int] | None:
        """One step of a beam search over its beams' rows of logits. -> the parent (old beam) of each new
        beam, or None when the search is done."""
        search, beams = sequence.search, sequence.beam_rows
        forced = sequence.params.forced_tokens
        rules = sequence.params.rules
        if rules is None or getattr(rules, "on_log_probs", False):
            # transformers' order: log-softmax, then the suppressed tokens and the rules
            log_probs = log_softmax(step.row_logits([b.row for b in beams]))
            log_probs[:, self.suppressed_ids] = -np.inf
            if rules is not None:
                for beam, row_log_probs in zip(beams, log_probs):
                    rules.apply(row_log_probs, search.tokens(beam.beam))
        else:  # the rules' own (OpenAI's): the logits through the rules, then log-softmax
            holders = {b.row: b for b in beams}
            log_probs = log_softmax(
                self.processed(step, list(holders), holders, lambda row: search.tokens(holders[row].beam))
            )
        if search.length <= len(forced):  # as transformers' forced_bos_token_id
            log_probs[:] = -np.inf
            log_probs[:, forced[search.length - 1]] = 0.0
        elif self.forced_eos_at(sequence, search.length - 1):
            log_probs[:] = -np.inf
            log_probs[:, self.eos_id] = 0.0
        if self.rules.renormalize_logits:
            log_probs = log_softmax(log_probs)
        parents = search.step(log_probs)
        return None if search.done else parents.tolist()

    def hypotheses(self, sequence: Sequence, decode) -> tuple[Hypothesis, ...]:
        """A finished beam search's n best, best first, as its caller gets them: without eos or the forced
        tokens, and ended by length where the checkpoint forced eos."""
        found = []
        first = len(sequence.params.forced_tokens)
        for tokens, score, total, log_probs in sequence.search.best(sequence.params.beams.num_return_sequences):
            ended = bool(tokens) and tokens[-1] == self.eos_id
            forced = ended and self.forced_eos_at(sequence, len(tokens) - 1)
            generated = tokens[first : len(tokens) - ended]
            mean = total / max(len(tokens) - first, 1)  # the forced tokens' log p are 0
            reason = EOS if ended and not forced else LENGTH
            mine = tuple(log_probs[first : first + len(generated)])
            found.append(Hypothesis(decode(generated), generated, reason, score, mean, mine))
        return tuple(found)

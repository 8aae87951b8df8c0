"""The running sequences' generation state as arrays over the cache's rows, so that a step's token choice
and its books (the next input token, the tokens so far, the limits) are array operations over all rows,
with Python work only for the rows that finish or stream. The cache moves these rows with its own when a
row is freed (generation_cache.py).

Counts of the rarer kinds of row (beams, sampled rows, rows that ignore eos, rows still waiting for their
first token, rows under a model's own logit rules) are kept too: a step whose rows are all plain greedy
ones skips the array operations that would find none, and on a small step each array operation costs more
than the work it does."""

from __future__ import annotations

import numpy as np

from .generation_cache import GenerationCache
from .sequence import BeamRow, Sequence

# What chooses a row's next token.
GREEDY, SAMPLED, BEAM = 0, 1, 2


class RowState:
    def __init__(self, cache: GenerationCache, bos_id: int, forced_eos: bool):
        """forced_eos: the checkpoint forces eos at the last position a request allows (token_choice.py)."""
        self.bos_id, self.checkpoint_forces_eos = bos_id, forced_eos
        books = cache.books
        self.kind = books(np.int8)
        self.next_input = books(np.int64)  # the token each row's next step reads
        self.count = books(np.int32)  # tokens generated so far (greedy and sampled rows)
        self.max_steps = books(np.int32)
        self.eos_ends = books(np.bool_)  # eos ends the sequence (not ignore_eos)
        self.forced_eos = books(np.bool_)  # eos comes at the last position allowed
        self.per_token = books(np.bool_)  # text followed token by token: streamed, or stop sequences
        self.counted = books(np.bool_)  # in the metrics (not the server's own probe)
        self.last_time = books(np.float64)  # when the row's last token came (0: none yet)
        self.tokens = books(np.int32, cache.geometry.target_tokens)  # the tokens so far (the forced ones first)
        self.forced_count = books(np.int32)  # how many first tokens are forced (in tokens from admission on)
        self.ruled = books(np.bool_)  # the row's logits go through its sequence's rules (params.rules)
        self.scored = books(np.bool_)  # the row sums its tokens' log-probabilities (params.scores)
        self.log_prob = books(np.float64)  # their sum so far
        self.token_log_prob = books(np.float32, cache.geometry.target_tokens)  # each token's, where tokens are
        self.scored_tokens = books(np.int32)  # and how many
        self.index = np.arange(cache.rows)
        self.beams = self.sampled = self.ignoring_eos = self.awaiting_first = 0  # rows of each, now
        self.forcing = 0  # greedy and sampled rows whose next token is a forced one
        self.scoring = 0  # rows that sum their log-probabilities
        self.ruling = 0  # greedy and sampled rows under logit rules

    @property
    def all_greedy(self) -> bool:
        """Every row's token is its argmax (no beam search, no sampling)."""
        return self.beams == 0 and self.sampled == 0

    def _count(self, kind: int, ignores_eos: bool, awaiting_first: bool, by: int) -> None:
        self.beams += by * (kind == BEAM)
        self.sampled += by * (kind == SAMPLED)
        self.ignoring_eos += by * (ignores_eos and kind != BEAM)
        self.awaiting_first += by * (awaiting_first and kind != BEAM)

    def admit(self, holder: Sequence | BeamRow) -> None:
        """A holder just given its row."""
        row = holder.row
        sequence = holder.sequence if isinstance(holder, BeamRow) else holder
        params = sequence.params
        self.kind[row] = BEAM if isinstance(holder, BeamRow) else GREEDY if params.greedy else SAMPLED
        self.next_input[row] = self.bos_id if params.start_token is None else params.start_token
        self.count[row] = 0
        self.max_steps[row] = params.max_steps
        self.eos_ends[row] = not params.ignore_eos
        self.forced_eos[row] = self.checkpoint_forces_eos and not params.ignore_eos
        self.per_token[row] = params.events_per_token
        self.counted[row] = not params.probe
        self.last_time[row] = 0.0
        forced = params.forced_tokens
        self.forced_count[row] = len(forced)
        self.tokens[row, : len(forced)] = forced
        self._count(int(self.kind[row]), params.ignore_eos, True, 1)
        self.forcing += bool(forced) and self.kind[row] != BEAM
        self.ruled[row] = params.rules is not None and self.kind[row] != BEAM  # a beam search applies them itself
        self.ruling += bool(self.ruled[row])
        self.scored[row] = params.scores and self.kind[row] != BEAM  # a beam search scores its beams itself
        self.log_prob[row], self.scored_tokens[row] = 0.0, 0
        self.scoring += bool(self.scored[row])

    def leave(self, holder: Sequence | BeamRow) -> None:
        """A holder about to give its row back."""
        row = holder.row
        self._count(int(self.kind[row]), not bool(self.eos_ends[row]), bool(self.last_time[row] == 0.0), -1)
        self.forcing -= bool(self.count[row] < self.forced_count[row] and self.kind[row] != BEAM)
        self.scoring -= bool(self.scored[row])
        self.ruling -= bool(self.ruled[row])

    def scores(self, row: int) -> dict:
        """A finishing row's scores, as Sequence.finish takes them: with params.scores, the mean
        log-probability per token and each reported token's; else none."""
        if not self.scored[row]:
            return {"mean_log_prob": None}
        reported = self.token_log_prob[row, self.forced_count[row] : self.count[row]]  # where reported() reads
        mean = float(self.log_prob[row]) / max(int(self.scored_tokens[row]), 1)
        return {"mean_log_prob": mean, "token_log_probs": tuple(reported.tolist())}

    def forced_now(self, count: int) -> np.ndarray | None:
        """Which of the first `count` rows take a forced token this step (None: none do)."""
        if not self.forcing:
            return None
        return (self.count[:count] < self.forced_count[:count]) & (self.kind[:count] != BEAM)

    def forced_tokens_now(self, forced: np.ndarray) -> np.ndarray:
        """The forced token of each row of the mask `forced` (forced_now's), in row order."""
        where = np.flatnonzero(forced)
        return self.tokens[where, self.count[where]].astype(np.int64)

    def forcing_ends(self, forced: np.ndarray) -> int:
        """After a step's tokens are counted: how many of the rows that took a forced token took their last."""
        count = forced.shape[0]
        return int(np.count_nonzero(forced & (self.count[:count] >= self.forced_count[:count])))

    def generated(self, row: int) -> np.ndarray:
        """The row's tokens so far (a view)."""
        return self.tokens[row, : self.count[row]]

    def reported(self, row: int) -> list[int]:
        """The row's tokens so far that its caller gets: without the forced ones."""
        return self.tokens[row, self.forced_count[row] : self.count[row]].tolist()

    def follow_beams(self, sequence: Sequence) -> None:
        """A beam search's rows read its beams' last tokens next (the start token before any)."""
        last_tokens = sequence.search.last_tokens
        for holder, token in zip(sequence.beam_rows, last_tokens):
            self.next_input[holder.row] = self.bos_id if token is None else token

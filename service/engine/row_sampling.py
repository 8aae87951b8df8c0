"""The next token of every sampled row of a decode step: a row's passes over the whole vocabulary are array
operations (its maximum; exp summed by blocks of 64, where every token is kept), and the rest of its work
is over its few candidate tokens or one block of 64, never token by token in Python.

How a row's token is drawn (testing/sampling_reference.py is the same, written plainly for one row):
- penalties on the tokens generated so far: CTRL's repetition penalty, then OpenAI's frequency and
  presence penalties (logit - frequency x count - presence);
- temperature: the row's logits less their maximum, over the temperature, in float32 ("scaled");
- top_k keeps the k highest (ties with the k-th too), min_p the tokens at least min_p times as probable
  as the most probable, top_p the smallest set of the most probable kept tokens whose probability reaches
  top_p;
- one uniform from the row's generator, found in the kept tokens' cumulative weights, in token order. A
  row that keeps every token finds its block of 64 in the blocks' cumulative sums first, then its token
  in that block, so no row sums the whole vocabulary one token after another.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .sampling import SamplingParams

BLOCK = 64  # tokens a block: the draw sums blocks, then the tokens of one block
# The nucleus is looked for among at least this many of the most probable tokens first (all of them only
# when they fall short of top_p): a stable sort of a 58k vocabulary took 3-7 ms a row.
NUCLEUS_CANDIDATES = 256


def penalized(logits: np.ndarray, generated, params: SamplingParams) -> None:
    """One row's logits (float32, changed in place) with the penalties on the tokens generated so far."""
    if len(generated) == 0 or not params.penalizes:
        return
    seen, counts = np.unique(np.asarray(generated, np.int64), return_counts=True)
    values = logits[seen]
    penalty = np.float32(params.repetition_penalty)
    if params.repetition_penalty != 1.0:
        values = np.where(values > 0, values / penalty, values * penalty)
    counts = counts.astype(np.float32)
    logits[seen] = values - np.float32(params.frequency_penalty) * counts - np.float32(params.presence_penalty)


@dataclass
class Row:
    """One sampled row of a step: its (penalized) logits, their maximum and its temperature."""

    logits: np.ndarray  # (vocab,) float32
    top: np.float32
    temperature: np.float32

    def scaled(self, tokens=slice(None)) -> np.ndarray:
        """(logit - max) / temperature of some tokens, float32: the same values whichever tokens are asked."""
        return (self.logits[tokens] - self.top) / self.temperature

    def group_maxima(self) -> np.ndarray:
        """The maximum logit of each group of tokens spaced vocab // 64 apart (token t in group t mod
        vocab // 64, the last few tokens a group of their own): any grouping bounds top_candidates, and
        numpy's max over a short last axis (contiguous blocks) took 93 us a row, across the row 5."""
        whole = self.logits.shape[0] // BLOCK * BLOCK
        maxima = self.logits[:whole].reshape(BLOCK, -1).max(axis=0)
        return np.append(maxima, self.logits[whole:].max()) if whole < self.logits.shape[0] else maxima

    def top_candidates(self, count: int) -> np.ndarray:
        """The tokens whose logit is at least the count-th largest group maximum, in token order: every one
        of the count highest logits is among them (the count groups of the largest maxima hold count logits
        at least that high), and seldom many more."""
        maxima = self.group_maxima()
        if count >= maxima.shape[0]:
            return np.arange(self.logits.shape[0])
        floor = np.partition(maxima, maxima.shape[0] - count)[maxima.shape[0] - count]
        return np.flatnonzero(self.logits >= floor)


def kept_tokens(row: Row, block_sums: np.ndarray | None, params: SamplingParams) -> np.ndarray | None:
    """A row's tokens that top_k, min_p and top_p keep, in token order (None: every token). block_sums:
    the row's exp(scaled) summed by block, where every token's weight was needed (no top_k)."""
    kept = None
    if params.top_k > 0:
        candidates = row.top_candidates(params.top_k)
        values = row.scaled(candidates)
        if params.top_k < values.shape[0]:
            kth = np.partition(values, values.shape[0] - params.top_k)[values.shape[0] - params.top_k]
            candidates, values = candidates[values >= kth], values[values >= kth]
        kept = candidates[values > -np.inf]
    if params.min_p > 0.0:
        floor = np.float32(np.log(params.min_p))  # p / p_max = exp(scaled): the maximum's scaled value is 0
        kept = np.flatnonzero(row.scaled() >= floor) if kept is None else kept[row.scaled(kept) >= floor]
    if params.top_p < 1.0:
        kept = nucleus(row, block_sums, kept, params.top_p)
    return kept


def nucleus(row: Row, block_sums: np.ndarray | None, kept: np.ndarray | None, top_p: float) -> np.ndarray:
    """The smallest set of the most probable kept tokens whose probability (among the kept) reaches top_p,
    ties in token order, the set in token order."""
    if kept is None:
        total = block_sums.sum(dtype=np.float64)
        pool = row.top_candidates(NUCLEUS_CANDIDATES)
    else:
        total = np.exp(row.scaled(kept)).sum(dtype=np.float64)
        pool = kept
    found = nucleus_in(row.scaled(pool), 0.0, total, top_p)
    if found is not None:
        return np.sort(pool[found])
    return wide_nucleus(row, total, top_p)  # the candidates fall short of top_p (a flat distribution)


def nucleus_in(values: np.ndarray, before: float, total: float, top_p: float) -> np.ndarray | None:
    """The first of some tokens' values, most probable first (ties in the values' order), whose probability
    with `before` reaches top_p: -> their positions in values (None: all of them fall short)."""
    order = np.argsort(-values, kind="stable")
    cumulative = before + np.cumsum(np.exp(values[order]), dtype=np.float64) / total
    cut = int(np.searchsorted(cumulative, top_p))
    return order[: cut + 1] if cut < order.shape[0] else None


def wide_nucleus(row: Row, total: float, top_p: float) -> np.ndarray:
    """The nucleus of a row of every token where it is wide: the tokens by their scaled value in bins of
    1/8 (a bin is a factor of 1.13 in probability), the bins' probabilities summed from the top, and only
    the bin where they reach top_p sorted. A stable sort of the whole vocabulary took 3-7 ms a row."""
    values = row.scaled()
    bins = np.minimum(-values * 8, 4095).astype(np.int64)  # 0: the most probable; -inf: the last bin
    cumulative = np.cumsum(np.bincount(bins, weights=np.exp(values), minlength=4096)) / total
    last = min(int(np.searchsorted(cumulative, top_p)), 4095)
    inside = np.flatnonzero(bins == last)
    found = nucleus_in(values[inside], cumulative[last - 1] if last else 0.0, total, top_p)
    kept = bins < last
    kept[inside if found is None else inside[found]] = True  # None: rounding, the whole bin a hair short
    return np.flatnonzero(kept)


def draw(row: Row, block_sums: np.ndarray | None, kept: np.ndarray | None, uniform: float) -> int:
    """A row's token for one uniform draw, found in the kept tokens' cumulative weights in token order;
    with every token kept, in the blocks' cumulative sums first, then in the block's own tokens."""
    if kept is not None:
        cumulative = np.cumsum(np.exp(row.scaled(kept)), dtype=np.float64)
        index = int(np.searchsorted(cumulative, uniform * cumulative[-1], side="right"))
        return int(kept[min(index, kept.shape[0] - 1)])
    cumulative = np.cumsum(block_sums, dtype=np.float64)
    target = uniform * cumulative[-1]
    block = min(int(np.searchsorted(cumulative, target, side="right")), block_sums.shape[0] - 1)
    while block_sums[block] == 0.0:  # rounding past the last block of any weight: that one
        block -= 1
    before = cumulative[block - 1] if block else 0.0
    weights = np.exp(row.scaled(slice(block * BLOCK, (block + 1) * BLOCK)))
    index = min(
        int(np.searchsorted(np.cumsum(weights, dtype=np.float64), target - before, side="right")), weights.shape[0] - 1
    )
    while weights[index] == 0.0:  # rounding past the block's last token of any weight: that one
        index -= 1
    return block * BLOCK + index


class RowSampler:
    """Draws the sampled rows' tokens of each step, one row after another: each row's passes over the
    vocabulary (its maximum, exp summed by block) run while its logits are in the cache, into a work array
    kept from step to step. Passes over all rows at once read 256 x 58k floats from memory once a pass, and
    fresh arrays of that size cost more in page faults than the arithmetic on them (measured at 256 rows of
    58k: 135 us a row with the passes over 8 rows at once, 112 one row after another)."""

    def __init__(self):
        self.work = np.zeros(0, np.float32)

    def block_sums(self, row: Row) -> np.ndarray:
        """exp(scaled) summed by block of 64 tokens (float32): (blocks,)."""
        vocab = row.logits.shape[0]
        if self.work.shape[0] != vocab:
            self.work = np.empty(vocab, np.float32)
        np.subtract(row.logits, row.top, out=self.work)
        np.divide(self.work, row.temperature, out=self.work)
        np.exp(self.work, out=self.work)
        return np.add.reduceat(self.work, np.arange(0, vocab, BLOCK))

    def sample(
        self,
        logits: np.ndarray,
        generated: list,
        params: list[SamplingParams],
        rngs: list,
        failures: dict[int, Exception] | None = None,
    ) -> np.ndarray:
        """(rows, vocab) float32 logits (changed in place by the penalties), each row's tokens so far,
        sampling parameters (temperature > 0) and generator -> each row's token. A row's token depends on
        its own logits, parameters and generator only, whatever else shares the step. failures: where
        given, a row that raises has its error there (by its index in these lists) and the token -1, and
        the others are drawn as they would be without it; else the error is raised."""
        logits = np.asarray(logits, np.float32)  # the rules are float32 (the server's logits are already)
        chosen = np.empty(len(params), np.int64)
        # A temperature near float32's smallest sends the others' scaled logits to -inf, which exp() makes
        # 0: what it means, not an overflow to warn of (one errstate a call: one a division cost 1 us each).
        with np.errstate(over="ignore"):
            for i, row_params in enumerate(params):
                try:
                    penalized(logits[i], generated[i], row_params)
                    row = Row(logits[i], logits[i].max(), row_params.float32_temperature)
                    # Rows without top_k need every token's weight: exp over the vocabulary, summed by block.
                    sums = self.block_sums(row) if row_params.top_k <= 0 else None
                    chosen[i] = draw(row, sums, kept_tokens(row, sums, row_params), rngs[i].random())
                except Exception as error:
                    if failures is None:
                        raise
                    failures[i], chosen[i] = error, -1
        return chosen

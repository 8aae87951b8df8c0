"""What each attention head does, in a few numbers per head (for `attnserve heads`).

For weights (layers, heads, queries, keys) whose rows are distributions over keys, averaged over queries:
- entropy: -sum p log p, in nats (0: all weight on one key; log(keys): uniform);
- distance: sum p |i - j|, how far from itself a query looks (self-attention only);
- special: the share of weight on special tokens ([CLS], [SEP], <s>, </s>);
- previous: the weight on the token just before the query (self-attention only; queries 1.. only);
- itself: the weight on the query's own position (self-attention only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HeadSummary:
    layer: int
    head: int
    entropy: float
    special: float
    distance: float | None  # None for cross-attention: queries and keys are different sequences
    previous: float | None
    itself: float | None


def summarize(
    weights: np.ndarray, layers: list[int], key_special: list[bool], self_attention: bool
) -> list[HeadSummary]:
    """weights (L, H, Q, K) -> one summary per head, in layer then head order."""
    weights = np.asarray(weights, dtype=np.float64)
    _, n_heads, queries, keys = weights.shape
    logs = np.log(np.where(weights > 0, weights, 1.0))  # 0 log 0 = 0
    # Clipped and + 0.0: rounding must not print a one-hot head's 0 as -0.000.
    entropy = np.clip(-(weights * logs).sum(-1), 0, None).mean(-1) + 0.0  # (L, H)
    special = weights[..., np.asarray(key_special, dtype=bool)].sum(-1).mean(-1)
    if self_attention:
        offsets = np.abs(np.arange(queries)[:, None] - np.arange(keys)[None, :])  # (Q, K)
        distance = (weights * offsets).sum(-1).mean(-1)
        itself = np.diagonal(weights, axis1=-2, axis2=-1).mean(-1)
        # Query 0 has no previous token: it is left out of the mean, not counted as 0.
        previous = np.diagonal(weights, offset=-1, axis1=-2, axis2=-1).mean(-1) if queries > 1 else None
    out = []
    for i, layer in enumerate(layers):
        for h in range(n_heads):
            out.append(
                HeadSummary(
                    layer=layer,
                    head=h,
                    entropy=float(entropy[i, h]),
                    special=float(special[i, h]),
                    distance=float(distance[i, h]) if self_attention else None,
                    previous=float(previous[i, h]) if self_attention and previous is not None else None,
                    itself=float(itself[i, h]) if self_attention else None,
                )
            )
    return out


def format_table(summaries: list[HeadSummary]) -> str:
    header = ["layer", "head", "entropy", "distance", "special", "previous", "self"]
    rows = [header]
    for s in summaries:
        values = [s.entropy, s.distance, s.special, s.previous, s.itself]
        rows.append([str(s.layer), str(s.head), *("-" if v is None else f"{v:.3f}" for v in values)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows)

"""Multi-head attention (Vaswani et al. 2017, section 3.2), one module for all three uses.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

The per-head projections W_i^Q (d_model x d_k) of all h heads are stored side by side as one
d_model x d_model matrix and split into heads by a reshape; likewise W^K and W^V.

- encoder self-attention: keys and values from the same sequence, a padding mask;
- decoder masked self-attention: keys and values of earlier positions come from a cache, the step's
  own positions under a causal mask (how the cache is read and written: decoder_cache.py);
- cross-attention: keys and values from the encoder output, projected once per sequence (project_kv)
  and passed in at every step.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class KeysValues(tuple):
    """(keys, values), each (B, H, S, Dh), with the mask (B, 1 or T, S) of the positions a query may see."""

    def __new__(cls, keys: Tensor, values: Tensor, mask: Tensor):
        return super().__new__(cls, (keys, values, mask))


def attention(
    query: Tensor, sources: list[KeysValues], scale: float, return_weights: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(Q K^T * scale) V over the concatenation of several key/value sources; scale = 1 / sqrt(d_k).

    query (B, H, T, Dh); each source's mask is boolean, True where a query may attend, broadcast over heads.
    Scores from all sources share one softmax, which is attention over their concatenation, without
    concatenating (copying) the keys and values themselves.

    With return_weights: (output, weights (B, H, T, sum S)). A masked position's weight is exactly 0 in
    float32: its score is the finite minimum, and exp(min - row max) underflows to 0.
    """
    scores = []
    for keys, _, mask in sources:
        s = torch.matmul(query, keys.transpose(-1, -2)) * scale  # (B, H, T, S)
        # A finite minimum, not -inf: a row with nothing to attend to (padding) stays finite.
        scores.append(s.masked_fill(~mask.unsqueeze(1), torch.finfo(s.dtype).min))
    weights = torch.softmax(torch.cat(scores, dim=-1), dim=-1)  # (B, H, T, sum S)
    output = None
    start = 0
    for (_, values, _), s in zip(sources, scores):
        length = s.shape[-1]
        part = torch.matmul(weights[..., start : start + length], values)  # (B, H, T, Dh)
        output = part if output is None else output + part
        start = start + length
    return (output, weights) if return_weights else output


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.scale = 1.0 / math.sqrt(self.d_head)
        self.w_q = nn.Linear(d_model, d_model)  # W_i^Q of all heads side by side
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        # A list while attention maps are recorded (model/attention_graph.py): each call appends its weights
        # (B, H, T, S). None otherwise, so that the serving graphs trace exactly as without it.
        self.recorded: list[Tensor] | None = None

    def split_heads(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, Dh)

    def merge_heads(self, x: Tensor) -> Tensor:
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, self.n_heads * self.d_head)  # (B, T, d_model)

    def project_kv(self, source: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of a sequence (B, S, d_model) -> two (B, H, S, Dh)."""
        return self.split_heads(self.w_k(source)), self.split_heads(self.w_v(source))

    def forward(self, x: Tensor, sources: list[KeysValues]) -> Tensor:
        """Queries from x (B, T, d_model) attend over the sources; returns (B, T, d_model)."""
        query = self.split_heads(self.w_q(x))
        if self.recorded is None:
            heads = attention(query, sources, self.scale)
        else:
            heads, weights = attention(query, sources, self.scale, return_weights=True)
            self.recorded.append(weights)
        return self.w_o(self.merge_heads(heads))

"""Multi-head attention (Vaswani et al. 2017, section 3.2), one module for all three uses.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

The per-head projections W_i^Q (d_model x d_k) of all h heads are stored side by side as one
d_model x d_model matrix and split into heads by a reshape; likewise W^K and W^V.

- encoder self-attention: keys and values from the same sequence, a padding mask;
- decoder masked self-attention: keys and values of earlier positions come from a cache, the step's
  own positions under a causal mask (how the cache is read and written: decoder_cache.py);
- cross-attention: keys and values from the encoder output, projected once per sequence (project_kv)
  and passed in at every step; in a decoder step, once per group of rows that share a source (a beam
  search's beams), whose queries are read as one block (CrossGroups).
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
    query: Tensor, sources: list[KeysValues], scale: float, return_weights: bool = False, bias: Tensor | None = None
) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(Q K^T * scale + bias) V over the concatenation of several key/value sources; scale = 1 /
    sqrt(d_k) (1 for T5); bias (B or 1, H, T, sum S), T5's relative positions, or None.

    query (B, H, T, Dh); each source's mask is boolean, True where a query may attend, broadcast over heads.
    Scores from all sources share one softmax, which is attention over their concatenation, without
    concatenating (copying) the keys and values themselves.

    With return_weights: (output, weights (B, H, T, sum S)). A masked position's weight is exactly 0 in
    float32: its score is the finite minimum, and exp(min - row max) underflows to 0.
    """
    scores = []
    query = query * scale  # scaled first: q.k^T of real weights can overflow float16 before the scale
    for keys, _, mask in sources:
        s = torch.matmul(query, keys.transpose(-1, -2))  # (B, H, T, S)
        # A finite minimum, not -inf: a row with nothing to attend to (padding) stays finite.
        scores.append(s.masked_fill(~mask.unsqueeze(1), torch.finfo(s.dtype).min))
    scores = torch.cat(scores, dim=-1)
    if bias is not None:  # after the mask: a masked score stays the finite minimum (float16's too)
        scores = (scores + bias).clamp(min=torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)  # (B, H, T, sum S)
    output = None
    start = 0
    for _, values, _ in sources:
        length = values.shape[-2]
        part = torch.matmul(weights[..., start : start + length], values)  # (B, H, T, Dh)
        output = part if output is None else output + part
        start = start + length
    return (output, weights) if return_weights else output


class CrossSlots(tuple):
    """Where a decoder step's rows find their groups' cross-attention K/V (CrossGroups): (lengths,
    query_slots, row_slots)."""

    def __new__(cls, lengths: Tensor, query_slots: Tensor, row_slots: Tensor):
        return super().__new__(cls, (lengths, query_slots, row_slots))


class CrossGroups(tuple):
    """A decoder step's cross-attention K/V kept once per group of rows that share a source (the beams of a
    beam search), and where each row's query goes: keys and values (G, H, S, Dh), right-padded; lengths
    (G) int32, each group's source length; query_slots (G * W) int64, the row whose query sits in each of
    the groups' W slots (a group with fewer rows repeats any row there, whose answer is not read);
    row_slots (B) int64, each row's slot. The step then reads each group's K/V once for its W queries,
    where a row-per-row layout reads a copy for each beam: over a long source, most of a step's time."""

    def __new__(cls, keys: Tensor, values: Tensor, lengths: Tensor, query_slots: Tensor, row_slots: Tensor):
        return super().__new__(cls, (keys, values, lengths, query_slots, row_slots))


def padding_only(sources: list[KeysValues]) -> bool:
    """One source whose mask is the same for every query (B, 1, S): the encoder's self-attention over its
    tokens, the decoder's cross-attention over the source."""
    return len(sources) == 1 and sources[0][2].shape[1] == 1


class PaddedAttention(torch.autograd.Function):
    """Attention of every query over each row's first `length` keys (right padding). In PyTorch: the
    reference computation. In ONNX: one com.microsoft.MultiHeadAttention node, which ONNX Runtime runs
    as a fused kernel (CPU in float32 and float16, CUDA), where the plain form's MatMul, Softmax and
    masking would be separate nodes the optimizer does not match."""

    @staticmethod
    def forward(ctx, query, keys, values, lengths, n_heads: int, scale: float, bias=None):
        """query (B, T, H * Dh); keys, values (B, H, S, Dh); lengths (B) int32; bias (B or 1, H, T, S) or None
        -> (B, T, H * Dh)."""
        batch, steps, width = query.shape
        q = query.view(batch, steps, n_heads, width // n_heads).transpose(1, 2)  # (B, H, T, Dh)
        visible = torch.arange(keys.shape[2])[None, None, :] < lengths[:, None, None]  # (B, 1, S)
        out = attention(q, [KeysValues(keys, values, visible)], scale, bias=bias)
        return out.transpose(1, 2).reshape(batch, steps, width)

    @staticmethod
    def symbolic(g, query, keys, values, lengths, n_heads: int, scale: float, bias=None):
        def omitted():  # an omitted optional input ("" in ONNX)
            node = g.op("prim::Constant")
            node.setType(torch._C.OptionalType.ofTensor())
            return node

        inputs = [query, keys, values, omitted(), lengths]
        if bias is not None and not bias.node().mustBeNone():
            inputs.append(bias)  # attention_bias: T5's relative positions
        out = g.op("com.microsoft::MultiHeadAttention", *inputs, num_heads_i=n_heads, scale_f=scale)
        # The exporter cannot infer a contrib op's shapes: the output is shaped as the query, whose width (a
        # beam group's query block has a reshaped type that lost it) is the heads' times the keys' head size.
        sizes = query.type().varyingSizes() or [None, None, None]
        out.setType(query.type().with_sizes([sizes[0], sizes[1], n_heads * keys.type().varyingSizes()[3]]))
        return out


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_head: int = 0, bias: bool = True, scaled: bool = True):
        """d_head: each head's width (0: d_model / n_heads); bias: on the projections; scaled: scores times
        1 / sqrt(d_head) (T5's are not)."""
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_head or d_model // n_heads
        self.scale = 1.0 / math.sqrt(self.d_head) if scaled else 1.0
        inner = n_heads * self.d_head
        self.w_q = nn.Linear(d_model, inner, bias=bias)  # W_i^Q of all heads side by side
        self.w_k = nn.Linear(d_model, inner, bias=bias)
        self.w_v = nn.Linear(d_model, inner, bias=bias)
        self.w_o = nn.Linear(inner, d_model, bias=bias)
        # A list while attention maps are recorded (model/export/attention_graph.py): each call appends its weights
        # (B, H, T, S). None otherwise, so that the serving graphs trace exactly as without it.
        self.recorded: list[Tensor] | None = None

    def split_heads(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, Dh)

    def merge_heads(self, x: Tensor) -> Tensor:
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, self.n_heads * self.d_head)  # (B, T, H * Dh)

    def project_kv(self, source: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of a sequence (B, S, d_model) -> two (B, H, S, Dh)."""
        return self.split_heads(self.w_k(source)), self.split_heads(self.w_v(source))

    def grouped(self, x: Tensor, groups: CrossGroups) -> Tensor:
        """Queries from x (B, T, d_model) over their groups' K/V (CrossGroups); returns (B, T, d_model)."""
        keys, values, lengths, query_slots, row_slots = groups
        query = self.w_q(x)
        batch, steps, width = query.shape
        block = query.index_select(0, query_slots).reshape(keys.shape[0], -1, width)  # (G, W * T, H * Dh)
        out = PaddedAttention.apply(block, keys, values, lengths, self.n_heads, self.scale)
        return self.w_o(out.reshape(-1, steps, width).index_select(0, row_slots))

    def forward(self, x: Tensor, sources: list[KeysValues], bias: Tensor | None = None) -> Tensor:
        """Queries from x (B, T, d_model) attend over the sources, their scores plus bias (B or 1, H, T, sum
        S) where given (T5's relative positions); returns (B, T, d_model)."""
        if torch.onnx.is_in_onnx_export() and self.recorded is None and padding_only(sources):
            keys, values, mask = sources[0]
            lengths = mask[:, 0].sum(-1, dtype=torch.int32)  # right-padded: each row's first `length` keys
            return self.w_o(PaddedAttention.apply(self.w_q(x), keys, values, lengths, self.n_heads, self.scale, bias))
        query = self.split_heads(self.w_q(x))
        if self.recorded is None:
            heads = attention(query, sources, self.scale, bias=bias)
        else:
            heads, weights = attention(query, sources, self.scale, return_weights=True, bias=bias)
            self.recorded.append(weights)
        return self.w_o(self.merge_heads(heads))

"""T5's relative position bias: no position enters the embeddings; instead each self-attention score gets a
learned bias per head for the distance from query to key, read from a small table by bucket (exact for
short distances, logarithmic up to max_distance, one bucket beyond). Bidirectional in the encoder (a key
before and after the query fall in different buckets), past-only in the decoder. T5 keeps one table per
stack (its first layer's), UMT5 one per layer; cross-attention has none."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from modeldir.config import ModelConfig


def relative_buckets(distance: Tensor, bidirectional: bool, buckets: int, max_distance: int) -> Tensor:
    """distance: key position - query position (int64, any shape) -> each one's bucket, as modeling_t5's
    _relative_position_bucket computes it. (Built without a tensor shaped like `distance` from its shape,
    which an exported decoder step would compute on the host and copy: CUDA graphs refuse copies.)"""
    after = None
    if bidirectional:
        buckets //= 2
        after = (distance > 0).long() * buckets  # keys after the query: the upper half of the buckets
        distance = distance.abs()
    else:
        distance = -torch.clamp(distance, max=0)  # keys after the query share bucket 0, masked anyway
    exact = buckets // 2
    far = (
        exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact) * (buckets - exact)).long()
    )  # in float32, as T5 computes it
    far = torch.clamp(far, max=buckets - 1)
    bucket = torch.where(distance < exact, distance, far)
    return bucket if after is None else bucket + after


class RelativePositionBias(nn.Module):
    """The tables of one stack: one (T5) or one per layer (UMT5), each (buckets, heads)."""

    def __init__(self, config: ModelConfig, layers: int, bidirectional: bool):
        super().__init__()
        tables = layers if config.relative_bias_per_layer else 1
        self.tables = nn.ModuleList(nn.Embedding(config.relative_buckets, config.n_heads) for _ in range(tables))
        self.bidirectional = bidirectional
        self.buckets, self.max_distance = config.relative_buckets, config.relative_max_distance

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """query_positions (B or 1, T), key_positions (B or 1, S) -> buckets (B or 1, T, S), the same for
        every layer. (A module call, so that the exported nodes are named for it: float16 graphs keep this
        arithmetic float32, as T5 computes it, since a bucket's bounds fall between float16's values.)"""
        distance = key_positions[:, None, :] - query_positions[:, :, None]
        return relative_buckets(distance, self.bidirectional, self.buckets, self.max_distance)

    def bias(self, buckets: Tensor, layer: int) -> Tensor:
        """Layer `layer`'s bias (B or 1, H, T, S), added to its self-attention scores."""
        table = self.tables[layer if len(self.tables) > 1 else 0]
        return table(buckets).permute(0, 3, 1, 2)

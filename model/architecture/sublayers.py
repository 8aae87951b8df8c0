"""The parts of a layer besides attention: the activations, the position-wise feed-forward (the paper's,
and T5's gated form), and the norms (LayerNorm, and T5's RMS norm without bias or mean)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from modeldir.config import ModelConfig

ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "silu": nn.SiLU,
}


class FeedForward(nn.Module):
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2, applied at each position alike."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.w_1 = nn.Linear(config.d_model, config.d_ff, bias=config.linear_bias)
        self.activation = ACTIVATIONS[config.activation]()
        self.w_2 = nn.Linear(config.d_ff, config.d_model, bias=config.linear_bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.activation(self.w_1(x)))


class GatedFeedForward(nn.Module):
    """T5 v1.1's FFN(x) = (act(x W_1) * x W_gate) W_2 (its wi_0, wi_1 and wo): the activated branch gates a
    linear one."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.w_1 = nn.Linear(config.d_model, config.d_ff, bias=config.linear_bias)
        self.w_gate = nn.Linear(config.d_model, config.d_ff, bias=config.linear_bias)
        self.activation = ACTIVATIONS[config.activation]()
        self.w_2 = nn.Linear(config.d_ff, config.d_model, bias=config.linear_bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.activation(self.w_1(x)) * self.w_gate(x))


class RMSNorm(nn.Module):
    """T5's layer norm: x / sqrt(mean(x^2) + eps) * weight, no mean taken out and no bias; the mean of
    squares in float32 whatever the input's type, as modeling_t5 computes it (float16 squares overflow)."""

    def __init__(self, width: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x if x.dtype == torch.float32 else x.float()  # no Cast node in a float32 graph
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * (h if h.dtype == self.weight.dtype else h.to(self.weight.dtype))


def feed_forward(config: ModelConfig) -> nn.Module:
    return GatedFeedForward(config) if config.feed_forward == "gated" else FeedForward(config)


def norm(config: ModelConfig) -> nn.Module:
    if config.norm == "rms":
        return RMSNorm(config.d_model, config.layer_norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

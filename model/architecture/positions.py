"""The fixed position tables: the paper's sinusoids (and Marian's split layout of them), and fairseq's,
which M2M100, NLLB and Whisper's encoder use."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from modeldir.config import ModelConfig


def sinusoid_table(n_positions: int, d_model: int, split: bool = False) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)). (P, d_model)
    split: the sines in the first half of each vector and the cosines in the second, as Marian lays them out."""
    position = torch.arange(n_positions, dtype=torch.float64)[:, None]
    frequency = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    sines, cosines = torch.sin(position * frequency), torch.cos(position * frequency[: d_model // 2])
    if split:
        return torch.cat([sines, cosines], dim=1).float()
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = sines
    table[:, 1::2] = cosines
    return table.float()


def fairseq_sinusoid_table(n_positions: int, d_model: int, padding_idx: int | None) -> Tensor:
    """fairseq's table (M2M100, NLLB; Whisper's encoder without a padding row): frequencies
    exp(-i ln(10000) / (d/2 - 1)), all sines then all cosines (a zero column for an odd d_model), the
    padding_idx row zero; in float32, as fairseq, openai-whisper and transformers compute it, so that the
    values are theirs to the bit. (P, d_model)"""
    half = d_model // 2
    frequency = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
    angles = torch.arange(n_positions, dtype=torch.int64).float()[:, None] * frequency[None]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if d_model % 2:
        table = torch.cat([table, torch.zeros(n_positions, 1)], dim=1)
    if padding_idx is not None:
        table[padding_idx] = 0
    return table


def position_table(config: ModelConfig) -> Tensor:
    """The fixed table of a sinusoidal kind, one row for each position the model takes, offset included."""
    rows = config.max_positions + config.position_offset
    if config.positions == "sinusoidal_fairseq":
        return fairseq_sinusoid_table(rows, config.d_model, config.pad_id)
    return sinusoid_table(rows, config.d_model, split=config.positions == "sinusoidal_split")

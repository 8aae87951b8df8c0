"""Attention maps: the softmax weights of every layer and head, as a graph of their own.

The serving graphs stay as they are (fused, cached, returning no weights). This graph recomputes a model
without a cache and returns the weights instead: the encoder's self-attention, and for seq2seq models the
decoder's masked self-attention and cross-attention over a whole target at once (teacher forcing), with
the token the model predicts at each target position. The server loads it only when asked to.

Weights at padded keys and future positions are exactly 0 (attention.py); rows of padded queries are
set to 0 here, so that every entry of the output has a meaning: a real query's row sums to 1.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch
from torch import Tensor, nn

from model.architecture.attention import MultiHeadAttention
from model.architecture.decoder_cache import NoCache
from model.architecture.transformer import EmbeddingModel, Seq2SeqModel
from modeldir.config import ModelConfig
from modeldir.files import attention_inputs, attention_outputs


@contextmanager
def recording(modules: list[MultiHeadAttention]):
    """-> one list per module, which receives the weights (B, H, T, S) of each of its calls."""
    lists = [[] for _ in modules]
    for module, weights in zip(modules, lists):
        module.recorded = weights
    try:
        yield lists
    finally:
        for module in modules:
            module.recorded = None


def _stacked(recorded: list[list[Tensor]], query_mask: Tensor) -> Tensor:
    """One call per layer (B, H, T, S) -> (L, B, H, T, S), with padded queries' rows set to 0."""
    weights = [w for (w,) in recorded]  # each layer attends once per pass
    keep = query_mask[None, :, None, :, None].to(weights[0].dtype)  # (1, B, 1, T, 1)
    return torch.stack(weights) * keep


class AttentionGraph(nn.Module):
    """input_ids, attention_mask (B, S) [, target_ids, target_mask (B, T)] -> attention_outputs(task).
    predicted_ids: the argmax at each target position, over the tokens the model may generate."""

    def __init__(self, model: EmbeddingModel | Seq2SeqModel):
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        target_ids: Tensor | None = None,
        target_mask: Tensor | None = None,
    ):
        encoder = self.model.encoder
        with recording([layer.self_attention for layer in encoder.layers]) as encoder_self:
            memory = encoder(input_ids, attention_mask)
        encoder_weights = _stacked(encoder_self, attention_mask)
        if isinstance(self.model, EmbeddingModel):
            return encoder_weights
        layers = self.model.decoder.layers
        cross = self.model.project_cross(memory)
        with (
            recording([layer.self_attention for layer in layers]) as decoder_self,
            recording([layer.cross_attention for layer in layers]) as cross_attention,
        ):
            hidden = self.model.decoder(target_ids, NoCache(), cross, attention_mask)
        logits = self.model.logits(hidden)  # (B, T, vocab)
        suppressed = self.model.config.suppressed_ids
        if suppressed:  # never generated (Marian's pad token): never predicted either, as greedy decoding does
            never = torch.zeros(logits.shape[-1], dtype=torch.bool)
            never[list(suppressed)] = True
            logits = logits.masked_fill(never, torch.finfo(logits.dtype).min)
        predicted = logits.argmax(dim=-1)  # (B, T)
        return (
            encoder_weights,
            _stacked(decoder_self, target_mask),
            _stacked(cross_attention, target_mask),
            predicted,
        )


def example_inputs(config: ModelConfig, seed: int = 0, batch: int = 2, source: int = 7, target: int = 5):
    """A right-padded batch (the last row padded) for export and parity checks."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, config.vocab_size, (batch, source), generator=generator)
    mask = torch.ones(batch, source, dtype=torch.long)
    mask[-1, source // 2 + 1 :] = 0
    if config.task == "embedding":
        return ids, mask
    target_ids = torch.randint(0, config.vocab_size, (batch, target), generator=generator)
    target_ids[:, 0] = config.bos_id
    target_mask = torch.ones(batch, target, dtype=torch.long)
    target_mask[-1, target // 2 + 1 :] = 0
    return ids, mask, target_ids, target_mask


def export_attention(model: EmbeddingModel | Seq2SeqModel, name: str, to_onnx):
    """The attention-map graph as an onnx.ModelProto; to_onnx: model_dir.py's exporter."""
    config = model.config
    inputs, outputs = attention_inputs(config.task), attention_outputs(config.task)
    axes = {
        "input_ids": {0: "batch", 1: "source"},
        "attention_mask": {0: "batch", 1: "source"},
        "encoder_self_attention": {1: "batch", 3: "source", 4: "source"},
    }
    if config.task == "seq2seq":
        axes.update(
            {
                "target_ids": {0: "batch", 1: "target"},
                "target_mask": {0: "batch", 1: "target"},
                "decoder_self_attention": {1: "batch", 3: "target", 4: "target"},
                "cross_attention": {1: "batch", 3: "target", 4: "source"},
                "predicted_ids": {0: "batch", 1: "target"},
            }
        )
    return to_onnx(AttentionGraph(model), example_inputs(config), inputs, outputs, axes, name, "attention", config)


@torch.no_grad()
def measure_attention_parity(model: EmbeddingModel | Seq2SeqModel, session) -> dict:
    """ONNX Runtime against PyTorch on padded batches of a few shapes: the largest difference in any
    weight, the largest |row sum - 1| over real queries and the largest weight where it must be 0.
    (The predicted tokens are left out: an argmax may flip on a near tie; tests check them on real models.)"""
    config = model.config
    figures = {"attention_max_abs_diff": 0.0, "attention_row_sum_max_error": 0.0, "attention_masked_max": 0.0}
    longest = min(64, config.max_positions)
    for seed, (batch, source, target) in enumerate([(1, 1, 1), (3, 17, 9), (4, longest, longest)]):
        args = example_inputs(config, seed, batch, source, target)
        expected = AttentionGraph(model)(*args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        arrays = [a.numpy() for a in args]
        actual = session.run(None, dict(zip(attention_inputs(config.task), arrays)))
        for (_, queries, keys, causal), a, e in zip(weight_masks(config.task, *arrays), actual, expected):
            figures["attention_max_abs_diff"] = max(
                figures["attention_max_abs_diff"], float(np.abs(a - e.numpy()).max())
            )
            row_error, masked = check_weights(a, queries, keys, causal)
            figures["attention_row_sum_max_error"] = max(figures["attention_row_sum_max_error"], row_error)
            figures["attention_masked_max"] = max(figures["attention_masked_max"], masked)
    return figures


def weight_masks(task: str, input_ids, attention_mask, target_ids=None, target_mask=None):
    """(name, query mask, key mask, causal) of each weights output, in attention_outputs order."""
    masks = [("encoder_self_attention", attention_mask, attention_mask, False)]
    if task == "seq2seq":
        masks += [
            ("decoder_self_attention", target_mask, target_mask, True),
            ("cross_attention", target_mask, attention_mask, False),
        ]
    return masks


def visible_positions(query_mask: np.ndarray, key_mask: np.ndarray, causal: bool) -> np.ndarray:
    """(B, T, S) bool: where a weight may be non-zero (a real query, a real key, not in the future)."""
    visible = query_mask.astype(bool)[:, :, None] & key_mask.astype(bool)[:, None, :]
    if causal:
        visible &= np.tril(np.ones((query_mask.shape[1], key_mask.shape[1]), dtype=bool))[None]
    return visible


def check_weights(weights: np.ndarray, query_mask, key_mask, causal: bool) -> tuple[float, float]:
    """weights (L, B, H, T, S) -> (largest |row sum - 1| over real queries, largest |weight| where it
    must be 0)."""
    real_rows = np.broadcast_to(query_mask.astype(bool)[None, :, None, :], weights.shape[:-1])
    row_error = float(np.abs(weights.sum(-1) - 1)[real_rows].max(initial=0.0))
    hidden = ~np.broadcast_to(visible_positions(query_mask, key_mask, causal)[None, :, None], weights.shape)
    return row_error, float(np.abs(weights[hidden]).max(initial=0.0))

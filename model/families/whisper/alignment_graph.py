"""Whisper's word-alignment graph (onnx/word_alignment.onnx, float32): one window's log-mel frames and a
token sequence in, read at once (teacher forcing); out, the cross-attention weights of the checkpoint's
alignment heads and each next token's probability among the text tokens. These are what openai-whisper's
timing.find_alignment reads from its model; the server runs this graph only for word timestamps.

The weights are the softmax over every frame of the window; find_alignment takes the softmax over the
frames that hold audio, which is the same weights renormalised over those frames (the server does that).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from model.architecture.decoder_cache import NoCache
from model.architecture.transformer import Seq2SeqModel
from model.export.attention_graph import recording

INPUTS = ("input_features", "target_ids")
OUTPUTS = ("alignment_weights", "next_token_probabilities")


class WordAlignmentGraph(nn.Module):
    """input_features (B, n_mels, frames), target_ids (B, T) -> alignment_weights (B, heads, T, frames / 2),
    next_token_probabilities (B, T - 1): at position t, the probability of target_ids[t + 1] under the
    softmax over the text tokens alone (the ids below <|endoftext|>), as find_alignment scores words."""

    def __init__(self, model: Seq2SeqModel):
        super().__init__()
        settings = model.config.whisper
        self.model = model
        self.heads = [tuple(pair) for pair in settings.alignment_heads]
        self.text_tokens = settings.end_of_text_id

    def forward(self, input_features: Tensor, target_ids: Tensor):
        memory = self.model.encode(input_features, None)
        cross = self.model.project_cross(memory)
        heard = torch.ones(memory.shape[:2], dtype=torch.long, device=memory.device)
        layers = self.model.decoder.layers
        with recording([layer.cross_attention for layer in layers]) as recorded:
            hidden = self.model.decoder(target_ids, NoCache(), cross, heard)
        weights = torch.stack([recorded[layer][0][:, head] for layer, head in self.heads], dim=1)
        probabilities = self.model.logits(hidden)[..., : self.text_tokens].softmax(dim=-1)
        following = target_ids[:, 1:].clamp(max=self.text_tokens - 1).unsqueeze(-1)
        return weights, probabilities[:, :-1].gather(-1, following).squeeze(-1)


def example_inputs(model: Seq2SeqModel, seed: int = 0, batch: int = 1, frames: int = 40, target: int = 6):
    config = model.config
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(batch, config.n_mels, frames, generator=generator)
    target_ids = torch.randint(0, config.vocab_size, (batch, target), generator=generator)
    target_ids[:, 0] = config.whisper.start_of_transcript_id
    return features, target_ids


def export_word_alignment(model: Seq2SeqModel, name: str, to_onnx):
    """The word-alignment graph as an onnx.ModelProto; to_onnx: model_dir.py's exporter."""
    axes = {
        "input_features": {0: "batch", 2: "frames"},
        "target_ids": {0: "batch", 1: "target"},
        "alignment_weights": {0: "batch", 2: "target", 3: "source"},
        "next_token_probabilities": {0: "batch", 1: "following"},
    }
    graph = WordAlignmentGraph(model)
    return to_onnx(graph, example_inputs(model), INPUTS, OUTPUTS, axes, name, "word_alignment", model.config)


@torch.no_grad()
def measure_word_alignment_parity(model: Seq2SeqModel, session) -> dict:
    """ONNX Runtime against PyTorch on a few shapes: the largest difference in any weight and probability."""
    graph = WordAlignmentGraph(model)
    largest = {"word_alignment_max_abs_diff": 0.0}
    for seed, (frames, target) in enumerate([(4, 1), (40, 6), (120, 17)]):
        args = example_inputs(model, seed, frames=frames, target=target)
        expected = graph(*args)
        actual = session.run(None, dict(zip(INPUTS, (a.numpy() for a in args))))
        for a, e in zip(actual, expected):
            difference = float(np.abs(a - e.numpy()).max(initial=0.0))
            largest["word_alignment_max_abs_diff"] = max(largest["word_alignment_max_abs_diff"], difference)
    return largest

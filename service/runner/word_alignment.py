"""A speech model's word-alignment graph (onnx/word_alignment.onnx, written at export): one window and its
tokens in, the alignment heads' cross-attention and each next token's probability out."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort


class WordAlignmentRunner:
    """Keeps nothing between calls."""

    def __init__(self, session: ort.InferenceSession):
        self.session = session

    def run(self, features: np.ndarray, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """features (n_mels, frames), tokens (T,) -> weights (heads, T, frames / 2), the softmax over every
        frame; next-token probabilities (T - 1,)."""
        feeds = {"input_features": features[None].astype(np.float32), "target_ids": np.array([tokens], np.int64)}
        weights, probabilities = self.session.run(None, feeds)
        return weights[0], probabilities[0]

"""The encoder graph of an embedding model: token ids in, pooled embeddings out (and, from the same call,
the outputs of its other heads that a batch asks for)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from .sessions import provider_of, shrink_options


class EmbeddingRunner:
    def __init__(self, session: ort.InferenceSession, output: str = "embedding", extra: tuple[str, ...] = ()):
        """output: the graph's one row per input: "embedding", or a classifier head's "logits". extra: the
        outputs of the model's other heads (modeldir.files.extra_outputs), fetched when a batch asks."""
        self.session, self.output, self.extra = session, output, extra
        self.provider = provider_of(session)

    @staticmethod
    def run_options() -> ort.RunOptions:
        """Options for one call, whose `terminate` stops it (within ~20 ms) when its callers have gone."""
        return ort.RunOptions()

    def release_memory(self) -> None:
        """Give the memory arena's unused regions back (after a burst of large batches): one tiny call
        whose run ends with the arena shrinking (ONNX Runtime keeps an arena's peak until told)."""
        one = np.ones((1, 1), np.int64)
        self.session.run([self.output], {"input_ids": one, "attention_mask": one}, shrink_options(self.provider))

    def run(
        self, input_ids: np.ndarray, attention_mask: np.ndarray, extra: tuple[str, ...] = (), run_options=None
    ) -> tuple[np.ndarray, ...]:
        """(B, S) int64 twice -> (pooled (B, d) float32, not normalised, *the extra outputs named, in their
        order): one call; the graph computes every output (ONNX Runtime runs the whole graph), only the
        named ones are copied out."""
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        return tuple(self.session.run([self.output, *extra], feeds, run_options))

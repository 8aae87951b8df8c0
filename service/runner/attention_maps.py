"""The attention-map graph of one model (onnx/attention.onnx, written at export): one input in, the
softmax weights of the chosen layers out."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from modeldir.files import attention_inputs, attention_outputs

from .cross_attention import CrossAttentionRunner

ENCODER_SELF, DECODER_SELF, CROSS = "encoder_self", "decoder_self", "cross"
# Each kind of attention: the graph output holding it.
OUTPUTS = {ENCODER_SELF: "encoder_self_attention", DECODER_SELF: "decoder_self_attention", CROSS: "cross_attention"}


@dataclass(frozen=True)
class Maps:
    weights: dict[str, np.ndarray]  # kind -> (layers, heads, queries, keys) float32, C order
    layers: dict[str, list[int]]  # kind -> the model layer of each index of the first axis
    predicted_ids: list[int]  # seq2seq: the argmax token at each decoder position


class AttentionMapsRunner:
    """Keeps nothing between calls."""

    def __init__(self, session: ort.InferenceSession, task: str):
        self.session, self.task = session, task

    def run(self, source_ids: list[int], target_ids: list[int] | None, layers: dict[str, list[int]]) -> Maps:
        """One input (a batch of one, so no padding): -> the chosen layers' weights."""
        arrays = [np.array([source_ids], np.int64), np.ones((1, len(source_ids)), np.int64)]
        if self.task == "seq2seq":
            arrays += [np.array([target_ids], np.int64), np.ones((1, len(target_ids)), np.int64)]
        feeds = dict(zip(attention_inputs(self.task), arrays))
        outputs = dict(zip(attention_outputs(self.task), self.session.run(None, feeds)))
        weights = {kind: np.ascontiguousarray(outputs[OUTPUTS[kind]][chosen, 0]) for kind, chosen in layers.items()}
        predicted = outputs["predicted_ids"][0].tolist() if self.task == "seq2seq" else []
        return Maps(weights, layers, predicted)

    def run_batch(self, items: list[tuple[list[int], list[int], int]]) -> list[np.ndarray]:
        """Each (source ids, target ids, layer)'s cross-attention at its layer, heads averaged, as one batch."""
        return CrossAttentionRunner(self.session, cut=False, task=self.task).run_batch(items)

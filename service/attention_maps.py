"""Attention maps at run time: the attention-map graph of one model (onnx/attention.onnx, written by
model/attention_maps.py) run for one input in the model thread, the layers a request asks for, and the
size of the answer, known before anything runs.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from .errors import invalid
from .metrics import ModelMetrics
from .model_files import attention_inputs, attention_outputs

ENCODER_SELF, DECODER_SELF, CROSS = "encoder_self", "decoder_self", "cross"
# Each kind of attention: the graph output holding it, and the decoder stack or the encoder's.
OUTPUTS = {ENCODER_SELF: "encoder_self_attention", DECODER_SELF: "decoder_self_attention", CROSS: "cross_attention"}
BYTES_PER_WEIGHT = 4  # float32


def stack_sizes(config: dict) -> dict[str, int]:
    """Layers of each kind of attention the model has: kind -> count."""
    sizes = {ENCODER_SELF: config["n_encoder_layers"]}
    if config["task"] == "seq2seq":
        sizes.update({DECODER_SELF: config["n_decoder_layers"], CROSS: config["n_decoder_layers"]})
    return sizes


def select_layers(config: dict, requested: list[int], model: str) -> dict[str, list[int]]:
    """kind -> the layers to return: all, or the requested ones (each must exist in every stack)."""
    sizes = stack_sizes(config)
    if not requested:
        return {kind: list(range(n)) for kind, n in sizes.items()}
    if len(set(requested)) != len(requested):
        raise invalid(f"layers: {list(requested)} names a layer twice")
    fewest = min(sizes.values())
    for i, layer in enumerate(requested):
        if layer >= fewest:
            stacks = (f"{config['n_encoder_layers']} encoder and {config['n_decoder_layers']} decoder layers"
                      if config["task"] == "seq2seq" else f"{fewest} layers")  # fmt: skip
            raise invalid(f"layers[{i}]: {layer}; model {model!r} has {stacks} (0-based: at most {fewest - 1})")
    return {kind: sorted(requested) for kind in sizes}


def weights_bytes(config: dict, layers: dict[str, list[int]], source: int, target: int) -> int:
    """Bytes of the weights an answer holds, for `source` encoder and `target` decoder positions."""
    positions = {ENCODER_SELF: source * source, DECODER_SELF: target * target, CROSS: target * source}
    heads = config["n_heads"]
    return sum(BYTES_PER_WEIGHT * len(chosen) * heads * positions[kind] for kind, chosen in layers.items())


@dataclass(frozen=True)
class Maps:
    weights: dict[str, np.ndarray]  # kind -> (layers, heads, queries, keys) float32, C order
    layers: dict[str, list[int]]  # kind -> the model layer of each index of the first axis
    predicted_ids: list[int]  # seq2seq: the argmax token at each decoder position


class AttentionRunner:
    """The attention-map graph of one model; keeps nothing between calls."""

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


class AttentionMaps:
    """A model's attention maps for the servicer to await: the graph runs in the model thread, between
    (never alongside) the batches and decode steps of the serving graphs."""

    def __init__(self, runner: AttentionRunner, executor: Executor, metrics: ModelMetrics | None = None):
        self.runner, self.executor, self.metrics = runner, executor, metrics
        self.calls = 0  # graph runs completed

    def submit(
        self, source_ids: list[int], target_ids: list[int] | None, layers: dict[str, list[int]]
    ) -> asyncio.Future:
        """Queue one run -> a future of its Maps. The run goes ahead even if the caller stops waiting (a
        model call cannot be taken back from the thread's queue): await it shielded, and count it as
        running until the future is done."""
        started = time.perf_counter()
        future = asyncio.get_running_loop().run_in_executor(
            self.executor, self.runner.run, source_ids, target_ids, layers
        )

        def ran(done: asyncio.Future) -> None:
            if done.cancelled() or done.exception() is not None:
                return
            self.calls += 1
            if self.metrics:
                positions = len(source_ids) + len(target_ids or ())
                self.metrics.model_call("attention", 1, positions, time.perf_counter() - started)

        future.add_done_callback(ran)
        return future

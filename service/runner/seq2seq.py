"""The encoder and decoder graphs of a seq2seq model on the device: sources in, their cross-attention K/V
left on the device; one decoder step over the device-resident cache, in which only the step's tokens
and lengths go in and only what token choice needs comes out (each row's argmax; whole logits only of
the rows that sample or search beams). Counts the bytes each call moves between host and device."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from modeldir.files import cache_names

from .cache_memory import CacheGeometry, CacheMemory, CrossLayout
from .sessions import DEVICE_TYPES, provider_of, shrink_options


@dataclass(frozen=True)
class EncoderOutput:
    cross: list[ort.OrtValue]  # each layer's cross-attention K/V (B, H, S, Dh), on the device
    sent: int  # bytes to the device
    fetched: int  # bytes back


@dataclass
class StepOutput:
    next_tokens: np.ndarray  # (rows,) int64: each row's argmax, suppressed tokens left out
    logits: np.ndarray  # (len(logit_rows), vocab) float32; none while they are on the device
    logit_rows: list[int]  # the rows `logits` holds, in its order
    sent: int  # bytes to the device
    fetched: int  # bytes back
    device_logits: ort.OrtValue | None = None  # the logits left on the device (a sampling graph reads them)

    def row_logits(self, rows: list[int]) -> np.ndarray:
        """The logits of some of logit_rows, in the given order (fetched from the device at the first ask)."""
        if self.device_logits is not None:
            self.logits, self.device_logits = self.device_logits.numpy(), None
            self.fetched += self.logits.nbytes
        where = {row: i for i, row in enumerate(self.logit_rows)}
        return self.logits[[where[row] for row in rows]]


class Seq2SeqRunner:
    """Keeps nothing between calls: the cache's memory comes in as an argument, and each call's result says
    what it moved between host and device."""

    def __init__(
        self,
        encoder: ort.InferenceSession,
        decoder: ort.InferenceSession,
        cache_graphs: dict,
        n_layers: int,
        precision: str,
        cuda_graphs: bool = False,
    ):
        """cuda_graphs: the decoder session was created with enable_cuda_graph: its bucketed steps capture
        and replay graphs (runner/decode_buckets.py), and its other steps must say they do not."""
        self.encoder, self.decoder, self.cache_graphs, self.n_layers = encoder, decoder, cache_graphs, n_layers
        self.precision, self.cuda_graphs = precision, cuda_graphs
        self.eager_options = None
        if cuda_graphs:
            self.eager_options = ort.RunOptions()
            self.eager_options.add_run_config_entry("gpu_graph_id", "-1")  # ONNX Runtime's "no capture, no replay"
        self.provider = provider_of(decoder)
        self.device = DEVICE_TYPES[self.provider]
        self.past_names = cache_names("past", n_layers)
        self.present_names = cache_names("present", n_layers)
        self.cross_names = cache_names("cross", n_layers)

    def cache_memory(
        self, geometry: CacheGeometry, rows: int, capacity: int, cross_tokens: int = 0, self_tokens: int = 0
    ) -> CacheMemory:
        """The cache's buffers on this runner's device (of this runner's precision: the geometry's);
        cross_tokens and self_tokens as CacheMemory takes them."""
        if geometry.precision != self.precision or geometry.n_layers != self.n_layers:
            raise ValueError(f"a cache of {geometry} does not fit {self.n_layers} {self.precision} decoder layers")
        return CacheMemory(
            geometry, rows, self.device, self.cache_graphs, capacity, cross_tokens=cross_tokens, self_tokens=self_tokens
        )

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> EncoderOutput:
        """(B, S) twice -> each layer's cross-attention K/V (B, H, S, Dh) in layer order, left on the device
        for the cache to take (CacheMemory.write_cross)."""
        binding = self.encoder.io_binding()
        binding.bind_cpu_input("input_ids", input_ids)
        binding.bind_cpu_input("attention_mask", attention_mask)
        binding.bind_output("last_hidden_state", self.device)  # not read, but every output is bound
        for name in self.cross_names:
            binding.bind_output(name, self.device)
        self.encoder.run_with_iobinding(binding)
        return EncoderOutput(binding.get_outputs()[1:], input_ids.nbytes + attention_mask.nbytes, 0)

    def encode_features(self, features: np.ndarray) -> EncoderOutput:
        """An audio encoder's windows: log-mel frames (B, n_mels, frames) float32 -> each layer's
        cross-attention K/V (B, H, frames / 2, Dh), left on the device as encode's."""
        binding = self.encoder.io_binding()
        binding.bind_cpu_input("input_features", features)
        binding.bind_output("last_hidden_state", self.device)
        for name in self.cross_names:
            binding.bind_output(name, self.device)
        self.encoder.run_with_iobinding(binding)
        return EncoderOutput(binding.get_outputs()[1:], features.nbytes, 0)

    def release_memory(self) -> None:
        """Give the encoder's memory arena's unused regions back (after long sources): one tiny encoder
        call whose run ends with the arena shrinking. (The decoder step's activations stay small.)"""
        (first,) = self.encoder.get_inputs()[:1]
        if first.name == "input_features":
            feeds = {"input_features": np.zeros((1, first.shape[1], 2), np.float32)}
        else:
            one = np.ones((1, 1), np.int64)
            feeds = {"input_ids": one, "attention_mask": one}
        self.encoder.run(None, feeds, shrink_options(self.provider))

    def step(
        self,
        input_ids: np.ndarray,
        past_lengths: np.ndarray,
        layout: CrossLayout,
        logit_rows: list[int],
        memory: CacheMemory,
        rows: int,
        *,
        run_options: ort.RunOptions | None = None,
        logits_on_device: bool = False,
    ) -> StepOutput:
        """One decoder step for the first `rows` rows of the cache: input_ids (rows, 1) int64, past_lengths
        (rows,) int32; layout: where the rows find their cross K/V (the cross buffers' first
        layout.groups rows). The step writes each row's K/V into the cache in place. logits_on_device: the
        logit rows' logits stay on the device (StepOutput.device_logits) for a sampling graph."""
        wanted = np.asarray(logit_rows, np.int64)
        binding = self.decoder.io_binding()
        sent = 0
        for name, array in (
            ("input_ids", input_ids),
            ("past_lengths", past_lengths),
            ("source_lengths", layout.source_lengths),
            ("logit_rows", wanted),
            ("query_slots", layout.query_slots),
            ("row_slots", layout.row_slots),
        ):
            binding.bind_cpu_input(name, array)
            sent += array.nbytes
        # GroupQueryAttention reads the longest row's length on the host: bound there, it never travels.
        binding.bind_cpu_input("total_length", np.array([int(past_lengths.max()) + input_ids.shape[1]], np.int32))
        binding.bind_output("next_token", "cpu")  # bound first: get_outputs() keeps the binding order
        binding.bind_output("logits", self.device if logits_on_device else "cpu")
        memory.bind_step(binding, self.past_names, self.present_names, self.cross_names, rows, layout.groups)
        self.decoder.run_with_iobinding(binding, run_options or self.eager_options)
        outputs = binding.get_outputs()
        next_tokens = outputs[0].numpy()
        if logits_on_device:
            none = np.zeros((0, 0), np.float32)
            return StepOutput(next_tokens, none, list(logit_rows), sent, next_tokens.nbytes, outputs[1])
        logits = outputs[1].numpy()
        return StepOutput(next_tokens, logits, list(logit_rows), sent, next_tokens.nbytes + logits.nbytes)

"""ONNX Runtime sessions: creating them on the right execution provider, and running the graphs.

Stateless between calls: what a call needs comes in as arrays and goes out as arrays.
"""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

log = logging.getLogger("attnserve.runner")

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


class ProviderError(RuntimeError):
    """The execution provider asked for cannot be had."""


@dataclass(frozen=True)
class SessionSettings:
    device: str = "auto"  # auto | cuda | cpu
    intra_op_threads: int = 0  # 0: one per available core
    graph_optimization: str = "all"
    spinning: bool = True


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _options(settings: SessionSettings) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = settings.intra_op_threads or available_cores()
    options.inter_op_num_threads = 1
    options.graph_optimization_level = OPTIMIZATION_LEVELS[settings.graph_optimization]
    # Spinning between operators saves a thread wake-up per operator; it also burns the cores that the
    # event loop and tokenization need, a trade measured in docs/benchmarks.md.
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if settings.spinning else "0")
    options.log_severity_level = 3  # errors only: the CUDA probe on a CPU machine is expected to fail
    return options


def nvidia_driver_present() -> bool:
    """Whether the CUDA driver library loads: without it, asking ONNX Runtime for CUDA can only fail
    (noisily), so `auto` does not ask."""
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def create_session(path, settings: SessionSettings) -> ort.InferenceSession:
    """A session on CUDA when asked and possible, else on the CPU.

    onnxruntime-gpu falls back to the CPU silently when the CUDA provider cannot load (no GPU, no CUDA
    libraries), so the providers the session really got are checked, not the ones asked for."""
    options = _options(settings)
    has_provider = CUDA in ort.get_available_providers()
    if settings.device == "cuda" and not has_provider:
        raise ProviderError(
            f"--device cuda: this onnxruntime ({ort.__version__}) has no CUDA provider "
            f"(available: {', '.join(ort.get_available_providers())}); install onnxruntime-gpu"
        )
    if settings.device == "cuda" and not nvidia_driver_present():
        raise ProviderError(
            "--device cuda: no NVIDIA driver (libcuda.so.1 does not load), so the CUDA provider cannot run"
        )
    wants_cuda = has_provider and settings.device in ("auto", "cuda") and nvidia_driver_present()
    providers = [CUDA, CPU] if wants_cuda else [CPU]
    session = ort.InferenceSession(str(path), options, providers=providers)
    got = session.get_providers()[0]
    if settings.device == "cuda" and got != CUDA:
        raise ProviderError(
            f"--device cuda: the CUDA provider did not load for {path} (session got {got}); "
            "check the GPU, the driver and the CUDA/cuDNN libraries, or use --device auto"
        )
    return session


def provider_of(session: ort.InferenceSession) -> str:
    return session.get_providers()[0]


class EncoderRunner:
    """The encoder graph of an embedding model: token ids in, pooled embeddings out."""

    def __init__(self, session: ort.InferenceSession):
        self.session = session
        self.provider = provider_of(session)

    def embed(self, input_ids: np.ndarray, attention_mask: np.ndarray, run_options=None) -> np.ndarray:
        """(B, S) int64 twice -> (B, d) float32, pooled, not normalised. Only this output is fetched."""
        (pooled,) = self.session.run(
            ["embedding"], {"input_ids": input_ids, "attention_mask": attention_mask}, run_options
        )
        return pooled


class Seq2SeqRunner:
    """The encoder and decoder graphs of a seq2seq model. Keeps nothing between calls: the cache's
    buffers come in as arguments, and a step writes its keys and values into them in place."""

    def __init__(self, encoder: ort.InferenceSession, decoder: ort.InferenceSession, n_layers: int):
        self.encoder, self.decoder, self.n_layers = encoder, decoder, n_layers
        self.provider = provider_of(decoder)
        self.past_names = [f"past_{kind}.{i}" for i in range(n_layers) for kind in ("key", "value")]
        self.cross_names = [f"cross_{kind}.{i}" for i in range(n_layers) for kind in ("key", "value")]

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> list[np.ndarray]:
        """(B, S) twice -> each layer's cross-attention keys and values, (B, H, S, Dh), in layer order."""
        outputs = self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
        return outputs[1:]

    def step(
        self,
        input_ids: np.ndarray,
        past_lengths: np.ndarray,
        encoder_attention_mask: np.ndarray,
        self_buffers: list[np.ndarray],
        cross_buffers: list[np.ndarray],
        run_options: ort.RunOptions | None = None,
    ) -> np.ndarray:
        """One decoder step for every row: -> logits (B, vocab). Each self-attention buffer (B, H, L, Dh),
        a contiguous array, is bound as both the past input and the present output of its layer, so the
        step's keys and values land in it and nothing is copied."""
        binding = self.decoder.io_binding()
        binding.bind_cpu_input("input_ids", input_ids)
        binding.bind_cpu_input("past_lengths", past_lengths)
        binding.bind_cpu_input("encoder_attention_mask", encoder_attention_mask)
        for name, buffer in zip(self.past_names, self_buffers):
            value = ort.OrtValue.ortvalue_from_numpy(buffer)  # wraps the array's memory
            binding.bind_ortvalue_input(name, value)
            binding.bind_ortvalue_output(name.replace("past_", "present_"), value)
        for name, buffer in zip(self.cross_names, cross_buffers):
            binding.bind_cpu_input(name, buffer)
        binding.bind_output("logits")
        self.decoder.run_with_iobinding(binding, run_options)
        return binding.get_outputs()[-1].numpy()  # the logits only (bound last): the buffers stay put

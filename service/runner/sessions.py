"""ONNX Runtime sessions: created with the server's settings on the execution provider it asks for, and
checked for what they really got."""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass

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

"""ONNX Runtime sessions: the device resolved once, sessions created on it with the server's settings,
and checked for what they really got: the provider, and on CUDA where every node was placed."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import logging
import os
from dataclasses import dataclass

import onnxruntime as ort

from .cuda_libraries import Loaded, preload

log = logging.getLogger("attnserve.runner")

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
DEVICE_TYPES = {CUDA: "cuda", CPU: "cpu"}  # OrtValue device names
OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
# Nodes the CUDA provider leaves to the CPU on purpose: shape arithmetic on a few integers, whose
# results the CUDA kernels read on the host anyway (ONNX Runtime's GetCpuPreferredNodes). Any other node
# on the CPU of a CUDA session has no CUDA kernel for its types: every step would copy its tensors to the
# host and back. (session.disable_cpu_ep_fallback cannot tell the two apart: it refuses both.)
SHAPE_OPS = frozenset(
    {
        "Shape",
        "Size",
        "Gather",
        "Unsqueeze",
        "Squeeze",
        "Concat",
        "Cast",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Range",
        "Slice",
        "ReduceMax",
        "ReduceMin",
        "Equal",
        "Less",
        "Greater",
        "Where",
        "Expand",
        "ConstantOfShape",
        "Neg",
        "Min",
        "Max",
        "Reshape",
    }
)


class ProviderError(RuntimeError):
    """The execution provider asked for cannot be had, or does not run the whole graph."""


@dataclass(frozen=True, kw_only=True)
class SessionSettings:
    device: str = "auto"  # auto | cuda | cpu
    intra_op_threads: int = 0  # 0: by the thread rule (threads_for)
    graph_optimization: str = "all"
    spinning: bool | None = None  # None: by the thread rule
    gpu_mem_limit: int = 0  # bytes of each CUDA session's arena; 0: no limit
    cpu_arena: bool = True  # ONNX Runtime's CPU memory arena (fast, but it keeps its peak)
    profile_prefix: str = ""  # where ONNX Runtime writes a profile of every run (end_profiling); "": none


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# A layer's multiply-adds per token below which a model's operators are too small to share among threads:
# measured (benchmarks/thread_bench.py, docs/benchmarks.md), one thread without spinning served the
# numbers model (82 k a layer) best by 1.2-1.3x, and all cores spinning served MiniLM (1.8 M) and a
# Marian-base-sized model (3.1 M) best by 1.05-1.4x; the bound lies between, near their geometric mean.
SMALL_LAYER_MACS = 400_000


def threads_for(settings: SessionSettings, provider: str, layer_macs: int) -> SessionSettings:
    """The settings with the intra-op threads and spinning they leave to the rule filled in: on CUDA one
    thread, asleep between calls (the host runs only the few operators placed there, and its cores are
    the event loop's); on the CPU one thread without spinning for a small model (layer_macs, a layer's
    multiply-adds per token, under SMALL_LAYER_MACS), else one per available core, spinning."""
    small = provider == CUDA or layer_macs < SMALL_LAYER_MACS
    threads = settings.intra_op_threads or (1 if small else available_cores())
    spinning = (not small) if settings.spinning is None else settings.spinning
    return dataclasses.replace(settings, intra_op_threads=threads, spinning=spinning)


def nvidia_driver_present() -> bool:
    """Whether the CUDA driver library loads: without it, asking ONNX Runtime for CUDA can only fail
    (noisily), so `auto` does not ask."""
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def resolve_device(requested: str) -> str:
    """The execution provider for `requested` (auto | cuda | cpu): CUDA when asked and possible."""
    has_provider = CUDA in ort.get_available_providers()
    if requested == "cuda" and not has_provider:
        raise ProviderError(
            f"--device cuda: this onnxruntime ({ort.__version__}) has no CUDA provider "
            f"(available: {', '.join(ort.get_available_providers())}); install onnxruntime-gpu"
        )
    if requested == "cuda" and not nvidia_driver_present():
        raise ProviderError(
            "--device cuda: no NVIDIA driver (libcuda.so.1 does not load), so the CUDA provider cannot run"
        )
    if not (has_provider and requested in ("auto", "cuda") and nvidia_driver_present()):
        return CPU
    loaded = cuda_libraries()
    if loaded.missing:
        if requested == "cuda":
            raise ProviderError(f"--device cuda: {loaded.describe()}; install onnxruntime-gpu[cuda,cudnn]")
        log.warning("CUDA provider unusable (%s): serving on the CPU", loaded.describe())
        return CPU
    return CUDA


@functools.cache
def cuda_libraries() -> Loaded:
    """CUDA and cuDNN from NVIDIA's pip packages wherever they are on sys.path, else the system's; once."""
    loaded = preload()
    log.info("%s", loaded.describe())
    return loaded


def _options(settings: SessionSettings, provider: str) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = settings.intra_op_threads or available_cores()  # by threads_for, if 0
    options.inter_op_num_threads = 1
    options.graph_optimization_level = OPTIMIZATION_LEVELS[settings.graph_optimization]
    # Spinning between operators saves a thread wake-up per operator; it also burns the cores that the
    # event loop and tokenization need, a trade measured in docs/benchmarks.md.
    spinning = settings.spinning is not False  # ONNX Runtime's own default, where the rule was not applied
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    options.enable_cpu_mem_arena = settings.cpu_arena
    # Warnings shown: ONNX Runtime says so when nodes land on another provider than the one asked for.
    options.log_severity_level = 2
    if provider == CUDA:
        options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    if settings.profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = settings.profile_prefix
    return options


def _provider_options(settings: SessionSettings, provider: str, cuda_graph: bool = False) -> list:
    if provider == CPU:
        return [CPU]
    cuda = {"device_id": "0", "arena_extend_strategy": "kSameAsRequested"}  # grow by what is asked, no more
    if settings.gpu_mem_limit:
        cuda["gpu_mem_limit"] = str(settings.gpu_mem_limit)
    if cuda_graph:
        cuda["enable_cuda_graph"] = "1"
    return [(CUDA, cuda), CPU]


def create_session(
    path, settings: SessionSettings, provider: str | None = None, cuda_graph: bool = False
) -> ort.InferenceSession:
    """A session on `provider` (default: the settings' device, resolved). onnxruntime-gpu falls back to
    the CPU silently when the CUDA provider cannot load, so the provider the session really got is
    checked, and on CUDA that no node but shape arithmetic runs on the CPU. cuda_graph: on CUDA, runs
    may capture and replay CUDA graphs (ONNX Runtime refuses the session where the graph cannot be)."""
    provider = provider or resolve_device(settings.device)  # path: a file, or a graph's bytes
    name = "a graph cut at load" if isinstance(path, bytes) else path
    session = ort.InferenceSession(
        path if isinstance(path, bytes) else str(path),
        _options(settings, provider),
        providers=_provider_options(settings, provider, cuda_graph),
    )
    got = session.get_providers()[0]
    if provider == CUDA and got != CUDA:
        raise ProviderError(
            f"--device cuda: the CUDA provider did not load for {name} (session got {got}); "
            "check the GPU, the driver and the CUDA/cuDNN libraries, or use --device auto"
        )
    if provider == CUDA:
        fallen = cpu_fallbacks(placements(session))
        if fallen:
            listed = ", ".join(f"{name} ({op})" for name, op in fallen[:8])
            raise ProviderError(
                f"{name}: {len(fallen)} nodes have no CUDA kernel for their types and would run on the CPU, "
                f"copying their tensors at every call: {listed}; export the model for this device "
                "(attnserve export --precision fp16) or serve it with --device cpu"
            )
    return session


def placements(session: ort.InferenceSession) -> list[tuple[str, str, str]]:
    """(provider, node name, op type) of every node, as the session placed them (needs the session
    option session.record_ep_graph_assignment_info)."""
    return [(s.ep_name, n.name, n.op_type) for s in session.get_provider_graph_assignment_info() for n in s.get_nodes()]


def cpu_fallbacks(placed: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """(name, op type) of the nodes that a CUDA session runs on the CPU for want of a kernel."""
    return [(name, op) for provider, name, op in placed if provider == CPU and op not in SHAPE_OPS]


def provider_of(session: ort.InferenceSession) -> str:
    return session.get_providers()[0]


def shrink_options(provider: str) -> ort.RunOptions:
    """Run options whose call ends with the provider's memory arena giving its free regions back."""
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "gpu:0" if provider == CUDA else "cpu:0")
    return options

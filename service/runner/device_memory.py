"""How much memory the CUDA device has free and in all, from the CUDA runtime that ONNX Runtime's CUDA
provider loads (cudaMemGetInfo through ctypes: no other GPU library is needed)."""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("attnserve.runner")

CUDART_NAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")


def _cudart():
    for name in CUDART_NAMES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def cuda_memory(device_id: int = 0) -> tuple[int, int] | None:
    """(free, total) bytes of the device, or None where the CUDA runtime is not to be had."""
    cudart = _cudart()
    if cudart is None:
        return None
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    if cudart.cudaSetDevice(device_id) != 0 or cudart.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)) != 0:
        log.warning("cudaMemGetInfo failed: device memory cannot be reported")
        return None
    return free.value, total.value


def cuda_memory_used(device_id: int = 0) -> int:
    """Bytes in use on the device (by every process), 0 where it cannot be read."""
    memory = cuda_memory(device_id)
    return memory[1] - memory[0] if memory else 0

"""The CUDA 13 and cuDNN 9 libraries that ONNX Runtime's CUDA provider needs, loaded before its first session
from NVIDIA's pip packages wherever they are installed on sys.path: onnxruntime.preload_dlls() looks only
beside the onnxruntime package, which an install with --target (or a virtual environment beside the
system's site-packages) puts elsewhere.

The provider (libonnxruntime_providers_cuda.so, no RUNPATH) needs libcudart, libcublasLt, libcublas and
libcurand by name, and opens libcudnn.so.9, libcufft.so.12 and libnvrtc.so.13 when it first needs them;
a library already loaded under that name is the one it gets, so loading them here by full path, in
dependency order, is enough. cuDNN finds its own sub-libraries beside it.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

# In load order; a library needs only those before it.
REQUIRED = ("libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13", "libcurand.so.10")
OPTIONAL = ("libnvJitLink.so.13", "libnvrtc.so.13", "libcufft.so.12", "libcudnn.so.9")
# CUDA 13's packages share nvidia/cu13/lib; cuDNN keeps nvidia/cudnn/lib; older layouts a folder each.
FOLDERS = (
    "nvidia/cu13/lib",
    "nvidia/cudnn/lib",
    "nvidia/cuda_runtime/lib",
    "nvidia/cublas/lib",
    "nvidia/curand/lib",
    "nvidia/cufft/lib",
    "nvidia/nvjitlink/lib",
    "nvidia/cuda_nvrtc/lib",
)


@dataclass
class Loaded:
    """What was loaded from where; missing: required libraries found nowhere (the provider cannot load)."""

    paths: dict[str, str] = field(default_factory=dict)  # library -> its file, or "system" (found by name)
    missing: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)  # optional ones found nowhere

    def describe(self) -> str:
        places = sorted({str(Path(p).parent) for p in self.paths.values() if p != "system"})
        text = f"{len(self.paths)} CUDA libraries loaded" + (f" from {', '.join(places)}" if places else "")
        if self.missing:
            text += f"; missing: {', '.join(self.missing)}"
        if self.absent:
            text += f"; not found (optional): {', '.join(self.absent)}"
        return text


def library_folders(paths: list[str] | None = None) -> list[Path]:
    """The NVIDIA package folders under every sys.path entry, in sys.path's order."""
    found = []
    for entry in sys.path if paths is None else paths:
        for folder in FOLDERS:
            candidate = Path(entry or ".") / folder
            if candidate.is_dir() and candidate not in found:
                found.append(candidate)
    return found


def preload(paths: list[str] | None = None) -> Loaded:
    """Load the libraries, each from the first folder that has it, else by name from the system's search
    path (a CUDA toolkit installed system-wide, LD_LIBRARY_PATH)."""
    folders, loaded = library_folders(paths), Loaded()
    for name in REQUIRED + OPTIONAL:
        path = next((folder / name for folder in folders if (folder / name).is_file()), None)
        try:
            ctypes.CDLL(str(path) if path else name, mode=os.RTLD_GLOBAL)
            loaded.paths[name] = str(path) if path else "system"
        except OSError:
            (loaded.missing if name in REQUIRED else loaded.absent).append(name)
    return loaded

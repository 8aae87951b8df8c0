"""Finding and loading the CUDA libraries from NVIDIA's pip packages wherever they are on sys.path
(service/runner/cuda_libraries.py): the folders of both layouts, sys.path's order, the first folder that has
a file, the system's search path after them, and what is missing said by name. Real libraries stand in for
CUDA's here (the zlib of this machine under CUDA's file names): dlopen by path does not read the name."""

from __future__ import annotations

import ctypes.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from service.runner.cuda_libraries import OPTIONAL, REQUIRED, library_folders, preload

ROOT = Path(__file__).resolve().parent.parent
ZLIB = ctypes.util.find_library("z")


def stand_in(folder: Path, names) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    target = next(
        p for p in (Path("/lib/x86_64-linux-gnu") / ZLIB, Path("/usr/lib/x86_64-linux-gnu") / ZLIB) if p.exists()
    )
    for name in names:
        (folder / name).symlink_to(target)


@pytest.mark.skipif(ZLIB is None, reason="no zlib to stand in for CUDA's libraries")
def test_libraries_are_found_in_either_layout_in_sys_path_order(tmp_path):
    first, second = tmp_path / "site-a", tmp_path / "site-b"
    stand_in(first / "nvidia" / "cu13" / "lib", ["libcudart.so.13", "libcublasLt.so.13"])
    stand_in(second / "nvidia" / "cu13" / "lib", REQUIRED)
    stand_in(second / "nvidia" / "cudnn" / "lib", ["libcudnn.so.9"])
    stand_in(second / "nvidia" / "cufft" / "lib", ["libcufft.so.12"])  # the older layout, a folder a package
    paths = [str(tmp_path / "nothing-here"), str(first), str(second)]
    assert library_folders(paths) == [
        first / "nvidia/cu13/lib",
        second / "nvidia/cu13/lib",
        second / "nvidia/cudnn/lib",
        second / "nvidia/cufft/lib",
    ]
    loaded = preload(paths)
    assert loaded.missing == []
    assert loaded.paths["libcudart.so.13"] == str(first / "nvidia/cu13/lib/libcudart.so.13")  # the first folder
    assert loaded.paths["libcublas.so.13"] == str(second / "nvidia/cu13/lib/libcublas.so.13")
    assert loaded.paths["libcudnn.so.9"] == str(second / "nvidia/cudnn/lib/libcudnn.so.9")
    assert loaded.paths["libcufft.so.12"] == str(second / "nvidia/cufft/lib/libcufft.so.12")
    assert set(loaded.absent) <= {"libnvJitLink.so.13", "libnvrtc.so.13"}
    assert f"from {first / 'nvidia/cu13/lib'}, " in loaded.describe()


def test_what_is_found_nowhere_is_named():
    """In a process of its own: the stand-ins above stay loaded in this one."""
    code = (
        "import json; from service.runner.cuda_libraries import preload; loaded = preload([]);"
        "print(json.dumps([loaded.paths, loaded.missing, loaded.absent, loaded.describe()]))"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    paths, missing, absent, described = json.loads(ran.stdout)
    if not missing:
        pytest.skip("this machine has CUDA 13 and cuBLAS on its library path")
    for name in REQUIRED + OPTIONAL:  # each either loaded (by name, from the system) or named as not found
        assert (name in paths) != (name in missing + absent), name
        assert paths.get(name, "system") == "system"
    assert f"missing: {', '.join(missing)}" in described

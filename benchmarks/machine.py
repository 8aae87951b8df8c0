"""The machine a benchmark ran on, printed before its tables: the CPU, the flags that matter (AVX2,
AVX-512, VNNI, AMX), the cores visible, and a GEMM probe (a float32 1024 x 1024 x 1024 matrix product in
PyTorch, in a fresh process of its own, on the benchmark's thread count): what the cores can do, to put
each engine's useful rate against. Machines here differ by up to 2x from day to day.

    .venv/bin/python -m benchmarks.machine [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from modeldir.files import cpu_flags

FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")

PROBE = """
import json, statistics, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
for _ in range(3):
    a @ b
times = []
for _ in range(7):
    t = time.perf_counter(); a @ b; times.append(time.perf_counter() - t)
print(json.dumps({"gflops": 2 * 1024**3 / statistics.median(times) / 1e9}))
"""


def cpu() -> dict:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    flags = cpu_flags()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": model or platform.processor(), "flags": [f for f in FLAGS if f in flags], "cores": cores}


def gemm_probe(threads: int) -> float:
    """GFLOP/s of a float32 1024^3 matrix product (median of 7), in a fresh process."""
    out = subprocess.run([sys.executable, "-c", PROBE, str(threads)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["gflops"]


def describe(threads: int) -> dict:
    return {**cpu(), "threads": threads, "gemm_gflops": gemm_probe(threads), "python": platform.python_version()}


def print_machine(machine: dict) -> None:
    print(
        f"machine: {machine['cpu']}, {machine['cores']} cores visible, flags {' '.join(machine['flags']) or '-'}; "
        f"GEMM probe (float32 1024^3, {machine['threads']} threads): {machine['gemm_gflops']:.0f} GFLOP/s"
    )


def share_of_probe(multiply_adds_per_item: float, items_per_second: float, machine: dict) -> tuple[float, float]:
    """An engine's useful rate (GFLOP/s: 2 x its multiply-adds x items/s) and that rate over the probe's."""
    gflops = 2 * multiply_adds_per_item * items_per_second / 1e9
    return gflops, gflops / machine["gemm_gflops"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    print_machine(describe(parser.parse_args().threads))

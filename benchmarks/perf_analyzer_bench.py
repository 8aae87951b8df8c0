"""NVIDIA's perf_analyzer against our KServe v2 ModelInfer: MiniLM, one sentence a request, at concurrency 1
to 32; sentences/s with p50 and p99 latency at each level.

One `attnserve serve` process (its defaults, both bundled models); perf_analyzer (Triton's own load
generator, C++, synchronous gRPC calls, one worker per concurrent request) in a process of its own, fed
512 sentences of 10-60 words (--input-data) round-robin. Each level is measured until perf_analyzer's own
stability test passes (count windows of --window requests, throughput and latency within 15% over three);
--rounds rounds with the levels' order turned round each round; medians.

    benchmarks/perf_analyzer_setup.sh   # once: the binary, and the newer C library it needs on Debian 12
    .venv/bin/python -m benchmarks.perf_analyzer_bench [--rounds 3] [--levels 1 2 4 8 16 32]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from testing.server_process import ServerProcess

from .common import print_table, sentences, write_results
from .machine import describe, print_machine

ROOT = Path(__file__).resolve().parent.parent
PERF_ANALYZER = ROOT / "benchmarks" / "perf_analyzer.sh"


def measure(target: str, concurrency: int, data: Path, window: int) -> dict:
    """One level: perf_analyzer's CSV row (microseconds) as numbers."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "level.csv"
        command = [
            str(PERF_ANALYZER),
            "-m",
            "minilm",
            "-u",
            target,
            "-i",
            "grpc",
            "--input-data",
            str(data),
            "--concurrency-range",
            f"{concurrency}:{concurrency}",
            "--measurement-mode",
            "count_windows",
            "--measurement-request-count",
            str(window),
            "-s",
            "15",
            "-r",
            "10",
            "-f",
            str(report),
        ]
        out = subprocess.run(command, capture_output=True, text=True, cwd=tmp)
        if out.returncode or not report.exists():
            raise RuntimeError(f"perf_analyzer at concurrency {concurrency}: {out.stdout[-1500:]} {out.stderr[-1500:]}")
        (row,) = list(csv.DictReader(report.open()))
    return {
        "sentences_per_s": float(row["Inferences/Second"]),
        "p50_ms": int(row["p50 latency"]) / 1e3,
        "p99_ms": int(row["p99 latency"]) / 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--window", type=int, default=256, help="requests in each measurement window")
    args = parser.parse_args()
    if not PERF_ANALYZER.exists() or subprocess.run([str(PERF_ANALYZER), "--version"], capture_output=True).returncode:
        sys.exit("perf_analyzer is not installed: run benchmarks/perf_analyzer_setup.sh")
    machine = describe(2)
    print_machine(machine)
    data = {"data": [{"text": {"content": [s], "shape": [1]}} for s in sentences(512, 10, 60, seed=11)]}
    runs: dict[int, list[dict]] = {level: [] for level in args.levels}
    server = ServerProcess()
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
            json.dump(data, file)
            file.flush()
            for round_ in range(args.rounds):
                for level in args.levels if round_ % 2 == 0 else args.levels[::-1]:
                    runs[level].append(measure(server.target, level, Path(file.name), args.window))
                print(f"round {round_ + 1} done", file=sys.stderr, flush=True)
    finally:
        server.stop()

    rows = []
    for level, results in runs.items():
        median = {key: statistics.median(r[key] for r in results) for key in results[0]}
        rows.append([level, f"{median['sentences_per_s']:.1f}", f"{median['p50_ms']:.1f}", f"{median['p99_ms']:.1f}"])
    print_table(
        f"perf_analyzer, KServe v2 ModelInfer, MiniLM, 1 sentence a request; {args.rounds} rounds, medians",
        ["concurrency", "sentences/s", "p50 ms", "p99 ms"],
        rows,
    )
    write_results("perf_analyzer_bench", {"machine": machine, "rounds": args.rounds, "runs": runs, "rows": rows})


if __name__ == "__main__":
    main()

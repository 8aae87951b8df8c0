"""Streamed text under two message policies, at 1, 32, 256 and 1,024 concurrent GenerateStream calls of 60
tokens (the numbers model, ignore_eos): a message for every token unless the stream is behind
(`--stream-messages-per-second 0`), against the budget that was the default before (1,000 messages a
second over all streams, a stream's messages at most a quarter second apart).

For each: tokens/s, the time between two messages of a stream (p50 and p99: how often a reader's text
moves), tokens a message, and the server's CPU per token (from /proc). A fresh server for every run (one
ONNX Runtime thread, 256 running sequences, room for 1,024 callers), callers in a process of their own
(benchmarks/stream_clients.py); the policies alternate; medians of --rounds.

    .venv/bin/python -m benchmarks.stream_policy_bench [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

import numpy as np

from testing.server_process import ServerProcess

from .common import print_table, write_results
from .machine import describe, print_machine

POLICIES = {"0": "a message a token unless behind", "1000": "budget of 1,000 a second"}
STREAMS = (1, 32, 256, 1024)
NEW_TOKENS = 60
SETTINGS = ["--intra-op-threads", "1", "--max-running-sequences", "256", "--max-concurrent-requests", "2048"]


def one_run(budget: str, streams: int) -> dict:
    server = ServerProcess(*SETTINGS, "--stream-messages-per-second", budget, models=["build/models/numbers"])
    try:
        before = server.cpu_seconds()
        command = [sys.executable, "-m", "benchmarks.stream_clients", "--target", server.target]
        command += [
            "--streams",
            str(streams),
            "--new-tokens",
            str(NEW_TOKENS),
            "--model",
            "numbers",
            "--input",
            "nine hundred",
        ]
        timings = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        cpu = server.cpu_seconds() - before
    finally:
        server.stop()
    gaps = np.array(timings["itl"]) * 1e3
    messages = len(timings["itl"]) + streams
    return {
        "tokens_per_second": timings["tokens"] / timings["wall"],
        "gap_p50_ms": float(np.percentile(gaps, 50)) if gaps.size else 0.0,
        "gap_p99_ms": float(np.percentile(gaps, 99)) if gaps.size else 0.0,
        "tokens_per_message": timings["tokens"] / messages,
        "cpu_us_per_token": cpu / timings["tokens"] * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    machine = describe(1)
    print_machine(machine)
    runs = {(budget, streams): [] for budget in POLICIES for streams in STREAMS}
    for _ in range(args.rounds):
        for streams in STREAMS:
            for budget in POLICIES:
                runs[budget, streams].append(one_run(budget, streams))
    table, figures = [], {}
    for (budget, streams), found in runs.items():
        median = {key: statistics.median(run[key] for run in found) for key in found[0]}
        figures[f"{budget} {streams}"] = median
        table.append(
            [
                POLICIES[budget],
                streams,
                f"{median['tokens_per_second']:,.0f}",
                f"{median['gap_p50_ms']:.1f} ms",
                f"{median['gap_p99_ms']:.1f} ms",
                f"{median['tokens_per_message']:.1f}",
                f"{median['cpu_us_per_token']:.0f} us",
            ]
        )
    print_table(
        f"GenerateStream, {NEW_TOKENS} tokens a stream; medians of {args.rounds}",
        ["policy", "streams", "tokens/s", "gap p50", "gap p99", "tokens a message", "server CPU a token"],
        table,
    )
    write_results("stream_policy_bench", {"machine": machine, "figures": figures})


if __name__ == "__main__":
    main()

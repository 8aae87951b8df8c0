"""A sampled row's next token at a Marian-sized vocabulary (58,101): the plain form (a full stable sort for
top_p, rng.choice over the whole vocabulary: testing/sampling_reference.py, which tests/test_sampling.py
checks the served form against token for token) against service/engine/sampling.py `next_token`, for plain
temperature, top_p, and top_k with top_p and a repetition penalty. Medians of --rounds.

    .venv/bin/python -m benchmarks.sampling_bench [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from service.engine.sampling import SamplingParams, next_token
from testing.sampling_reference import reference_next_token

from .common import print_table, write_results
from .machine import describe, print_machine

VOCAB = 58101  # Marian's English-German vocabulary
CASES = {
    "temperature 0.8": SamplingParams(temperature=0.8),
    "temperature 0.8, top_p 0.9": SamplingParams(temperature=0.8, top_p=0.9),
    "top_k 50, top_p 0.9, penalty 1.2": SamplingParams(temperature=0.8, top_k=50, top_p=0.9, repetition_penalty=1.2),
}


def per_token_us(choose, params: SamplingParams, rounds: int, draws: int = 100) -> float:
    logits = np.random.default_rng(0).standard_normal(VOCAB).astype(np.float32) * 3
    generated = list(range(30))
    times = []
    for _ in range(rounds):
        rng = np.random.default_rng(1)
        started = time.perf_counter()
        for _ in range(draws):
            choose(logits, generated, params, rng)
        times.append((time.perf_counter() - started) / draws * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    machine = describe(1)
    print_machine(machine)
    rows, figures = [], {}
    for name, params in CASES.items():
        before = per_token_us(reference_next_token, params, args.rounds)
        after = per_token_us(next_token, params, args.rounds)
        figures[name] = {"reference_us": before, "served_us": after}
        rows.append([name, f"{before:,.0f} us", f"{after:,.0f} us", f"{before / after:.1f}x"])
    print_table(
        f"a sampled token at {VOCAB:,} tokens; medians of {args.rounds}",
        ["sampling", "plain form", "served", "ratio"],
        rows,
    )
    write_results("sampling_bench", {"machine": machine, "figures": figures})


if __name__ == "__main__":
    main()
